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
