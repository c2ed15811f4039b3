from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest
from scipy import sparse
from transformers import AutoTokenizer, BertModel

from metricbert_trainer.data.annotations import Annotations
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.errors import UsageError
from metricbert_trainer.evaluation.evaluator import evaluate_scorer
from metricbert_trainer.evaluation.scorers import (
    EncoderScorer,
    LdaScorer,
    SentenceTransformerScorer,
    TfidfScorer,
    is_sentence_transformers_folder,
    load_encoder,
    recorded_max_length,
)

METADATA = ["country", "points", "price", "variety", "province", "winery"]


@pytest.fixture(scope="module")
def wine_frame(wines_csv):
    return pd.read_csv(wines_csv, dtype=str, nrows=120)


@pytest.fixture(scope="module")
def catalog(wine_frame):
    return load_catalog(wine_frame)


@pytest.fixture(scope="module")
def annotations():
    return Annotations(similar={0: (5, 9), 3: (4,), 17: (30, 31, 32)}, source="hand-made")


@pytest.fixture(scope="module")
def tiny_sentence_transformer(tiny_model_path, tmp_path_factory):
    from sentence_transformers import SentenceTransformer, models

    transformer = models.Transformer(tiny_model_path, max_seq_length=64)
    pooling = models.Pooling(transformer.get_embedding_dimension(), pooling_mode="mean")
    path = tmp_path_factory.mktemp("tiny-st")
    SentenceTransformer(modules=[transformer, pooling]).save(str(path))
    return str(path)


def test_tfidf_is_one_sparse_matrix_per_field(catalog):
    vectors = TfidfScorer().item_vectors(catalog)
    assert set(vectors) == {"title", "description"}
    assert all(sparse.issparse(matrix) and matrix.shape[0] == len(catalog) for matrix in vectors.values())
    assert set(TfidfScorer(mode="concat").item_vectors(catalog)) == {"concat"}


def test_lda_gives_topic_mixtures(catalog):
    vectors = LdaScorer(num_topics=4, max_iter=3).item_vectors(catalog)
    assert set(vectors) == {"title", "description"}
    for matrix in vectors.values():
        assert matrix.shape == (len(catalog), 4)
        np.testing.assert_allclose(matrix.sum(axis=1), 1.0, atol=1e-6)


def test_scorers_see_text_fields_only(wine_frame, annotations):
    """The wine proxy labels come from metadata: scrambling it must not move any score."""
    scrambled = wine_frame.copy()
    rng = np.random.default_rng(0)
    for column in METADATA:
        scrambled[column] = rng.permutation(scrambled[column].to_numpy())
    original, shuffled = load_catalog(wine_frame), load_catalog(scrambled)
    assert original.dataset.column_names == ["id", "title", "description"]
    for scorer in (TfidfScorer(), LdaScorer(num_topics=4, max_iter=3)):
        assert evaluate_scorer(scorer, original, annotations) == evaluate_scorer(
            scorer, shuffled, annotations
        )


def test_every_scorer_evaluates_through_the_same_metrics(
    catalog, annotations, tiny_model_path, tiny_sentence_transformer
):
    model, tokenizer = load_encoder(tiny_model_path, device="cpu")
    scorers = [
        TfidfScorer(),
        LdaScorer(num_topics=4, max_iter=3),
        EncoderScorer(model, tokenizer, mode="concat"),
        EncoderScorer(model, tokenizer, mode="title"),
        SentenceTransformerScorer(tiny_sentence_transformer, device="cpu"),
    ]
    for scorer in scorers:
        metrics = evaluate_scorer(scorer, catalog, annotations, ks=(10,))
        assert set(metrics) == {"mpr", "mrr", "hr@10", "raw_mpr", "raw_mrr", "raw_hr@10", "map", "ndcg@20"}
        assert all(0.0 <= value <= 100.0 for value in metrics.values()), scorer.name


def test_sentence_transformers_folder_loads_as_the_same_encoder(tiny_sentence_transformer, catalog):
    assert is_sentence_transformers_folder(tiny_sentence_transformer)
    model, tokenizer = load_encoder(tiny_sentence_transformer, device="cpu")
    ours = EncoderScorer(model, tokenizer, max_length=64).item_vectors(catalog)
    theirs = SentenceTransformerScorer(tiny_sentence_transformer, device="cpu").item_vectors(catalog)
    for field in catalog.fields:  # same weights, same mean pooling, same truncation
        np.testing.assert_allclose(ours[field], theirs[field], atol=1e-5)


def test_the_recorded_length_is_the_one_sentence_transformers_reads(
    tiny_sentence_transformer, tiny_model_path, minilm_path, tmp_path
):
    """What the commands read a model at by default (``cli.options.command_max_length``): a
    recipe-style ``sentence_bert_config.json`` (all-MiniLM-L6-v2's 256), the tokenizer's limit in a
    folder sentence-transformers 6 saved (64), and a Transformer kept in a subfolder (48)."""
    from sentence_transformers import SentenceTransformer

    nested = tmp_path / "nested"
    shutil.copytree(tiny_model_path, nested / "0_Transformer")
    AutoTokenizer.from_pretrained(tiny_model_path, model_max_length=48).save_pretrained(
        nested / "0_Transformer"
    )
    module = {
        "idx": 0,
        "name": "0",
        "path": "0_Transformer",
        "type": "sentence_transformers.models.Transformer",
    }
    (nested / "modules.json").write_text(json.dumps([module]), encoding="utf-8")
    recorded = [
        recorded_max_length(*load_encoder(path, device="cpu"))
        for path in (minilm_path, tiny_sentence_transformer, nested)
    ]
    theirs = [
        SentenceTransformer(str(path), device="cpu").max_seq_length
        for path in (minilm_path, tiny_sentence_transformer, nested)
    ]
    assert recorded == theirs == [256, 64, 48]
    # A plain folder records none, nor does one that merely sits inside a sentence-transformers folder.
    shutil.copytree(tiny_model_path, nested / "masked_lm")
    for path in (tiny_model_path, nested / "masked_lm"):
        assert recorded_max_length(*load_encoder(path, device="cpu")) is None


def test_load_encoder_reads_minilm_and_mlm_checkpoints(minilm_path, tiny_model_path):
    assert is_sentence_transformers_folder(minilm_path) and not is_sentence_transformers_folder(
        tiny_model_path
    )
    model, _ = load_encoder(minilm_path, device="cpu")
    assert isinstance(model, BertModel) and model.config.hidden_size == 384
    with pytest.raises(UsageError, match="-missing does not exist"):
        load_encoder(tiny_model_path + "-missing")
