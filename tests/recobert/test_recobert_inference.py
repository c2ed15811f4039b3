"""RecoBERT's four-score inference on a tiny real model and real wines: batching, re-ranking, weights."""

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import AutoModelForMaskedLM, AutoTokenizer

from metricbert_trainer.base.pooling import mean_pool
from metricbert_trainer.data.annotations import Annotations
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.evaluation.evaluator import evaluate_scorer
from metricbert_trainer.recobert import (
    FourScores,
    RecoBertRankingEvaluator,
    RecoBertScorer,
    encode_pairs,
    tdm_score,
    z_normalise,
)

SEEDS = [0, 7, 23]


@pytest.fixture(scope="module")
def catalog(wines_csv):
    return load_catalog(pd.read_csv(wines_csv, dtype=str, nrows=40)[["id", "title", "description"]])


@pytest.fixture(scope="module")
def model_and_tokenizer(tiny_model_path):
    torch.manual_seed(0)
    return AutoModelForMaskedLM.from_pretrained(tiny_model_path).eval(), AutoTokenizer.from_pretrained(
        tiny_model_path
    )


def _scorer(model_and_tokenizer, **options):
    model, tokenizer = model_and_tokenizer
    return RecoBertScorer(model, tokenizer, batch_size=7, max_length=96, **options)


def _pair_score(model_and_tokenizer, title, description):
    """One pair on its own, no batching: the reference for every batched score."""
    model, tokenizer = model_and_tokenizer
    batch = encode_pairs(tokenizer, [title], [description], max_length=96)
    with torch.no_grad():
        hidden = model.base_model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            token_type_ids=batch["token_type_ids"],
        ).last_hidden_state
    return tdm_score(mean_pool(hidden, batch["title_mask"]), mean_pool(hidden, batch["description_mask"]))


def test_batched_scores_equal_pairs_scored_one_at_a_time(model_and_tokenizer, catalog):
    scores = _scorer(model_and_tokenizer).scores(catalog, SEEDS)
    titles, descriptions = catalog.texts("title"), catalog.texts("description")
    for row, seed in enumerate(SEEDS):
        for candidate in (3, 19, 39):
            expected_ct = float(_pair_score(model_and_tokenizer, titles[candidate], descriptions[seed]))
            expected_st = float(_pair_score(model_and_tokenizer, titles[seed], descriptions[candidate]))
            assert scores.tdm_candidate_title[row, candidate] == pytest.approx(expected_ct, abs=1e-5)
            assert scores.tdm_seed_title[row, candidate] == pytest.approx(expected_st, abs=1e-5)
        # The seed's own pair is not a cross pair.
        assert np.isnan(scores.tdm_candidate_title[row, seed]) and np.isnan(scores.tdm_seed_title[row, seed])
    # Cos_T and Cos_D come from each item's own pair: the seed is identical to itself.
    np.testing.assert_allclose(scores.cos_title[np.arange(3), SEEDS], 1.0, atol=1e-5)
    np.testing.assert_allclose(scores.cos_description[np.arange(3), SEEDS], 1.0, atol=1e-5)


def test_distances_are_minus_the_weighted_sum_of_z_scores(model_and_tokenizer, catalog):
    scores = _scorer(model_and_tokenizer).scores(catalog, SEEDS)
    weights = (0.5, 2.0, 1.0, 3.0)
    valid = scores.candidates
    expected = -(
        0.5 * z_normalise(scores.cos_description, valid)
        + 2.0 * z_normalise(scores.cos_title, valid)
        + 1.0 * z_normalise(scores.tdm_candidate_title, valid)
        + 3.0 * z_normalise(scores.tdm_seed_title, valid)
    )
    np.testing.assert_allclose(scores.distances(weights)[valid], expected[valid], rtol=1e-5, atol=1e-5)


def test_reranking_equals_full_inference_when_k_covers_the_catalog(model_and_tokenizer, catalog):
    full = _scorer(model_and_tokenizer).distance_rows(catalog, SEEDS)
    for k in (len(catalog) - 1, 10_000):
        np.testing.assert_allclose(
            _scorer(model_and_tokenizer, rerank_top_k=k).distance_rows(catalog, SEEDS),
            full,
            rtol=1e-6,
            atol=1e-6,
        )


def test_reranked_view_of_full_scores_equals_a_reranking_pass(model_and_tokenizer, catalog):
    full = _scorer(model_and_tokenizer).scores(catalog, SEEDS)
    for k in (3, 12):
        np.testing.assert_allclose(
            full.reranked(k, (1, 1, 0, 0)).distances((1, 1, 1, 1)),
            _scorer(model_and_tokenizer, rerank_top_k=k).distance_rows(catalog, SEEDS),
            rtol=1e-5,
            atol=1e-5,
        )


def test_reranking_reorders_the_first_stages_top_k_and_keeps_the_rest_behind(model_and_tokenizer, catalog):
    k = 8
    reranked = _scorer(model_and_tokenizer, rerank_top_k=k)
    scores = reranked.scores(catalog, SEEDS)
    distances = scores.distances(reranked.weights)
    first_stage = scores.first_stage(reranked.weights)
    full = _scorer(model_and_tokenizer).scores(catalog, SEEDS)
    for row, seed in enumerate(SEEDS):
        candidates = [item for item in range(len(catalog)) if item != seed]
        top = sorted(candidates, key=lambda item: -first_stage[row, item])[:k]
        assert set(np.flatnonzero(~np.isnan(scores.tdm_seed_title[row]))) == set(top)
        order = sorted(candidates, key=lambda item: distances[row, item])
        assert set(order[:k]) == set(top)
        # The rest follow in first-stage order.
        assert order[k:] == sorted(order[k:], key=lambda item: -first_stage[row, item])
        # Within the top K the order is the full sum's, with the cross scores z-normalised over the K.
        cross = np.zeros(len(catalog), dtype=bool)
        cross[top] = True
        total = (
            first_stage[row]
            + z_normalise(full.tdm_candidate_title[row : row + 1], cross[None])[0]
            + z_normalise(full.tdm_seed_title[row : row + 1], cross[None])[0]
        )
        assert order[:k] == sorted(top, key=lambda item: -total[item])


def test_four_scores_from_hand_made_matrices():
    seeds = np.array([0])
    scores = FourScores(
        seeds=seeds,
        cos_description=np.array([[1.0, 0.9, 0.1, 0.5]]),
        cos_title=np.array([[1.0, 0.2, 0.3, 0.4]]),
        tdm_candidate_title=np.array([[np.nan, 0.1, 0.9, np.nan]]),
        tdm_seed_title=np.array([[np.nan, 0.2, 0.8, np.nan]]),
    )
    # Only Cos_D: item 1 (0.9) before 3 (0.5) before 2 (0.1).
    only_description = scores.distances((1, 0, 0, 0))
    assert list(np.argsort(only_description[0, 1:]) + 1) == [1, 3, 2]
    # With the cross scores: items 1 and 2 were re-ranked (2 wins on both TDM scores), item 3 was
    # not and comes after both, although its first-stage score beats item 2's.
    both = scores.distances((1, 0, 1, 1))
    assert list(np.argsort(both[0, 1:]) + 1) == [2, 1, 3]
    with pytest.raises(ValueError, match="4 weights"):
        scores.distances((1, 1))
    with pytest.raises(ValueError, match="not all 0"):
        scores.distances((0, 0, 0, 0))


def test_evaluator_ranks_with_the_four_scores_and_leaves_the_model_training(model_and_tokenizer, catalog):
    model, tokenizer = model_and_tokenizer
    annotations = Annotations(similar={0: (2, 5), 7: (8,), 23: (30, 31)}, source="hand-made")
    model.train()
    evaluator = RecoBertRankingEvaluator(
        catalog=catalog, annotations=annotations, batch_size=7, max_length=96, rerank_top_k=5
    )
    metrics = evaluator(model, tokenizer)
    assert model.training
    model.eval()
    same = evaluate_scorer(_scorer(model_and_tokenizer, rerank_top_k=5), catalog, annotations)
    assert same == pytest.approx(metrics)
    assert 0.0 <= metrics["mpr"] <= 100.0


def test_bf16_precision_moves_scores_little(model_and_tokenizer, catalog):
    exact = _scorer(model_and_tokenizer, precision="fp32").scores(catalog, SEEDS[:1])
    fast = _scorer(model_and_tokenizer, precision="bf16").scores(catalog, SEEDS[:1])
    np.testing.assert_allclose(fast.tdm_seed_title[0, 1:], exact.tdm_seed_title[0, 1:], atol=2e-2)
    with pytest.raises(ValueError, match="precision"):
        _scorer(model_and_tokenizer, precision="fp8").scores(catalog, SEEDS[:1])
