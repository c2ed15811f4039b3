from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from transformers import AutoModelForMaskedLM, AutoTokenizer

from metricbert_trainer.data.annotations import Annotations
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.evaluation.evaluator import RankingEvaluator, evaluate_scorer, evaluate_vectors
from metricbert_trainer.evaluation.scorers import EncoderScorer


@pytest.fixture(scope="module")
def catalog(wines_csv):
    return load_catalog(pd.read_csv(wines_csv, dtype=str, nrows=80)[["id", "title", "description"]])


@pytest.fixture(scope="module")
def annotations():
    return Annotations(similar={1: (2, 7, 40), 10: (11,), 55: (3, 60)}, source="hand-made")


def test_evaluator_returns_filtered_and_raw_metrics_and_leaves_the_model_training(
    tiny_model_path, catalog, annotations
):
    model = AutoModelForMaskedLM.from_pretrained(tiny_model_path)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    model.train()
    evaluator = RankingEvaluator(catalog=catalog, annotations=annotations, batch_size=16, max_length=64)
    metrics = evaluator(model, tokenizer)
    assert model.training
    assert set(metrics) == {
        "mpr",
        "mrr",
        "hr@10",
        "hr@100",
        "raw_mpr",
        "raw_mrr",
        "raw_hr@10",
        "raw_hr@100",
        "map",
        "ndcg@20",
    }
    assert all(isinstance(value, float) and 0.0 <= value <= 100.0 for value in metrics.values())
    # HR@100 over an 80-item catalog: every annotated item is within the top 100.
    assert metrics["hr@100"] == metrics["raw_hr@100"] == 100.0
    same = evaluate_scorer(
        EncoderScorer(model, tokenizer, batch_size=16, max_length=64), catalog, annotations
    )
    assert same == metrics

    title_only = RankingEvaluator(catalog=catalog, annotations=annotations, mode="title", ks=(5,))(
        model, tokenizer
    )
    assert set(title_only) == {"mpr", "mrr", "hr@5", "raw_mpr", "raw_mrr", "raw_hr@5", "map", "ndcg@20"}


def test_vectors_that_put_annotated_items_first_score_100_filtered(annotations):
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(80, 16)).astype(np.float32)
    for seed, items in annotations.similar.items():
        vectors[list(items)] = vectors[seed] + 0.01 * rng.normal(size=(len(items), 16))
    metrics = evaluate_vectors({"text": vectors}, "angular", annotations, ks=(1,))
    assert metrics["mpr"] == metrics["mrr"] == metrics["hr@1"] == 100.0
    assert metrics["raw_hr@1"] == pytest.approx(100 * 3 / 6)  # one first place per seed, 6 pairs


def test_evaluator_rejects_a_bad_mode_or_foreign_annotations(catalog, annotations):
    with pytest.raises(ValueError, match="Unknown scoring mode"):
        RankingEvaluator(catalog=catalog, annotations=annotations, mode="variety")
    with pytest.raises(ValueError, match="beyond the 80"):
        RankingEvaluator(catalog=catalog, annotations=Annotations(similar={1: (500,)}, source="other.csv"))
