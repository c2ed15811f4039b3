from __future__ import annotations

import numpy as np
import pytest

from metricbert_trainer.evaluation.metrics import PairRanks, annotated_ranks, ranking_metrics, summarize

# Seed 0 and five candidates; items 2 and 4 are annotated, item 1 is a nearer non-annotated item.
DISTANCES = np.array([0.0, 0.1, 0.2, 0.3, 0.4, 0.5])


def test_raw_and_filtered_ranks_by_hand():
    raw, filtered = annotated_ranks(DISTANCES, seed=0, annotated=[2, 4])
    np.testing.assert_array_equal(raw.ranks, [2, 4])  # item 1 before item 2; items 1, 2, 3 before item 4
    np.testing.assert_array_equal(raw.candidates, [5, 5])  # everything but the seed
    np.testing.assert_array_equal(filtered.ranks, [2, 3])  # item 2 no longer counts against item 4
    np.testing.assert_array_equal(filtered.candidates, [4, 4])  # minus the other annotated item


def test_metrics_by_hand():
    metrics = ranking_metrics(DISTANCES[None, :], seeds=[0], annotated=[[2, 4]], ks=(1, 2, 3))
    # Raw: PR = 100 * (1 - (r - 1) / (C - 1)) with C = 5: 75 and 25.
    assert metrics["raw_mpr"] == pytest.approx(50.0)
    assert metrics["raw_mrr"] == pytest.approx(100 * (1 / 2 + 1 / 4) / 2)
    assert (metrics["raw_hr@1"], metrics["raw_hr@2"], metrics["raw_hr@3"]) == (0.0, 50.0, 50.0)
    # Filtered: C = 4, ranks 2 and 3: PR 66.7 and 33.3.
    assert metrics["mpr"] == pytest.approx(50.0)
    assert metrics["mrr"] == pytest.approx(100 * (1 / 2 + 1 / 3) / 2)
    assert (metrics["hr@1"], metrics["hr@2"], metrics["hr@3"]) == (0.0, 50.0, 100.0)


def test_a_perfect_ranking_is_100_filtered_but_not_raw():
    distances = np.array([0.9, 0.1, 0.2, 0.3, 0.7, 0.8])  # the seed (item 0) is far from itself: ignored
    metrics = ranking_metrics(distances[None, :], seeds=[0], annotated=[[1, 2, 3]], ks=(1, 3))
    assert metrics["mpr"] == metrics["mrr"] == metrics["hr@1"] == metrics["hr@3"] == 100.0
    assert metrics["raw_mrr"] == pytest.approx(100 * (1 + 1 / 2 + 1 / 3) / 3)
    assert metrics["raw_hr@1"] == pytest.approx(100 / 3) and metrics["raw_hr@3"] == 100.0
    assert metrics["raw_mpr"] == pytest.approx(np.mean([100, 75, 50]))


def test_pairs_are_averaged_across_seeds():
    distances = np.array(
        [
            [0.0, 0.1, 0.2, 0.3],  # seed 0: item 1 at rank 1
            [0.1, 0.0, 0.2, 0.3],  # seed 1: items 2 and 3 at raw ranks 2 and 3
        ]
    )
    metrics = ranking_metrics(distances, seeds=[0, 1], annotated=[[1], [2, 3]], ks=(1,))
    assert metrics["raw_mrr"] == pytest.approx(100 * (1 + 1 / 2 + 1 / 3) / 3)
    assert metrics["raw_mpr"] == pytest.approx(np.mean([100, 50, 0]))
    assert metrics["mrr"] == pytest.approx(100 * (1 + 1 / 2 + 1 / 2) / 3)


def test_ties_get_the_mean_rank():
    flat = np.zeros(11)
    metrics = ranking_metrics(flat[None, :], seeds=[5], annotated=[[1, 2]], ks=(10,))
    assert metrics["raw_mpr"] == pytest.approx(50.0) and metrics["mpr"] == pytest.approx(50.0)
    raw, filtered = annotated_ranks(flat, seed=5, annotated=[1, 2])
    np.testing.assert_allclose(raw.ranks, [5.5, 5.5])  # 10 candidates, all tied
    np.testing.assert_allclose(filtered.ranks, [5.0, 5.0])  # 9 candidates, all tied


def test_summarize_and_errors():
    assert summarize(PairRanks(np.array([1.0]), np.array([1])), ks=(1,)) == {
        "mpr": 100.0,
        "mrr": 100.0,
        "hr@1": 100.0,
    }
    with pytest.raises(ValueError, match="itself"):
        annotated_ranks(DISTANCES, seed=0, annotated=[0, 2])
    with pytest.raises(ValueError, match="NaN"):
        annotated_ranks(np.array([0.0, np.nan, 0.2]), seed=0, annotated=[2])
    with pytest.raises(ValueError, match="distance rows"):
        ranking_metrics(DISTANCES[None, :], seeds=[0, 1], annotated=[[2]])
    with pytest.raises(ValueError, match="at least 1"):
        ranking_metrics(DISTANCES[None, :], seeds=[0], annotated=[[2]], ks=(0,))


def test_map_and_ndcg_at_20_from_each_seed_raw_ranks():
    # Seed 0: its annotated items 1 and 2 at raw ranks 1 and 3. Seed 5: its one annotated item 30
    # behind more than 20 others, so it counts for MAP but not for NDCG@20.
    distances = np.array(
        [[0.0, 0.1, 0.3, 0.2, 0.4, 0.5] + [0.6 + i / 100 for i in range(30)], np.linspace(0.01, 1.0, 36)]
    )
    distances[1, 5] = 0.0  # the seed itself
    distances[1, 30] = 0.7
    rank_of_30 = 1 + int((np.delete(distances[1], [5, 30]) < 0.7).sum())
    assert rank_of_30 > 20

    metrics = ranking_metrics(distances, [0, 5], [[1, 2], [30]])

    average_precision = [(1 / 1 + 2 / 3) / 2, 1 / rank_of_30]
    ndcg = [(1 + 1 / np.log2(4)) / (1 + 1 / np.log2(3)), 0.0]
    assert metrics["map"] == pytest.approx(100 * np.mean(average_precision))
    assert metrics["ndcg@20"] == pytest.approx(100 * np.mean(ndcg))


def test_the_evaluate_metric_loads_offline_and_gives_the_library_numbers(tmp_path, monkeypatch):
    """``evaluate.load(RANKING_METRIC_PATH)`` with the Hub out of reach: the hand-computed case of
    its docstring, and the same numbers as ``ranking_metrics`` and ``summarize`` on random input."""
    import evaluate

    from metricbert_trainer.evaluation.metrics import (
        RANKING_METRIC_PATH,
        PairRanks,
        ranking_metrics,
        summarize,
    )

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "modules"))
    scores = evaluate.load(RANKING_METRIC_PATH)
    assert scores.compute(predictions=[[0.0, 0.2, 0.9, 0.4]], references=[[1, 3]], seeds=[0], ks=[1]) == {
        "mpr": 100.0,
        "mrr": 100.0,
        "hr@1": 100.0,
        "raw_mpr": 75.0,
        "raw_mrr": 75.0,
        "raw_hr@1": 50.0,
        "map": 100.0,
        "ndcg@20": 100.0,
    }
    rng = np.random.default_rng(0)
    rows = rng.random((5, 40))
    seeds = [0, 7, 13, 21, 39]
    annotated = [[1, 2, 3], [8], [14, 30], [1, 2, 5, 9], [0, 38]]
    expected = ranking_metrics(rows, seeds, annotated, ks=(5, 10))
    got = scores.compute(predictions=rows.tolist(), references=annotated, seeds=seeds, ks=[5, 10])
    assert got == pytest.approx(expected)
    # Similarity scores: the same ranking from the negated rows.
    similar = scores.compute(
        predictions=(-rows).tolist(), references=annotated, seeds=seeds, ks=[5, 10], higher_is_better=True
    )
    assert similar == pytest.approx(expected)

    ranks = evaluate.load(RANKING_METRIC_PATH, "ranks")
    assert ranks.compute(predictions=[1.0, 3.0], references=[3, 3], ks=[1]) == pytest.approx(
        {"mpr": 50.0, "mrr": 200.0 / 3, "hr@1": 50.0}
    )
    pairs = PairRanks(rng.integers(1, 40, 30).astype(float), np.full(30, 39))
    assert ranks.compute(
        predictions=pairs.ranks.tolist(), references=pairs.candidates.tolist()
    ) == pytest.approx(summarize(pairs))
