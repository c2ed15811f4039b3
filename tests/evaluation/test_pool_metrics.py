from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.data.graded_pools import load_graded_pools
from metricbert_trainer.evaluation.pool_metrics import pool_cutoff, pool_scores, ranked_pool


def pools_of(tmp_path, pools, size):
    ids = [str(item) for item in range(size)]
    catalog_path = tmp_path / "catalog.csv"
    pd.DataFrame({"id": ids, "title": ids, "description": ids}).to_csv(catalog_path, index=False)
    catalog = load_catalog(catalog_path)
    path = tmp_path / "pools.jsonl"
    path.write_text("".join(json.dumps(pool) + "\n" for pool in pools), encoding="utf-8")
    return load_graded_pools(path, catalog)


def test_a_pool_by_hand(tmp_path):
    # Query 0; candidates 1-10 in pool order, graded; the distances rank 3, 1, (5 and 2 tied), 4, ...
    grades = [3, 0, 2, 1, 0, 0, 2, 0, 0, 0]
    pools = pools_of(
        tmp_path, [{"query_id": "0", "candidates": [str(i) for i in range(1, 11)], "relevance": grades}], 11
    )
    distances = np.array([0.0, 0.2, 0.3, 0.1, 0.4, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9])
    order = ranked_pool(distances, pools.pools[0])
    # Items 2 and 5 tie at 0.3: pool order keeps 2 first.
    assert [int(pools.pools[0].candidates[i]) for i in order] == [3, 1, 2, 5, 4, 6, 7, 8, 9, 10]
    ranked_grades = [2, 3, 0, 0, 1, 0, 2, 0, 0, 0]
    scores = pool_scores([distances], pools).summary()
    # MAP, relevant = grade >= 2: items at ranks 1, 2 and 7 -> (1/1 + 2/2 + 3/7) / 3.
    assert scores["map"] == pytest.approx(100 * (1 + 1 + 3 / 7) / 3)

    def ndcg(k):
        dcg = sum(g / math.log2(r + 2) for r, g in enumerate(ranked_grades[:k]))
        ideal = sum(g / math.log2(r + 2) for r, g in enumerate(sorted(grades, reverse=True)[:k]))
        return 100 * dcg / ideal

    assert pool_cutoff(10) == 2
    assert scores["ndcg%20"] == pytest.approx(ndcg(2))  # int(0.2 * 10) = 2: (2 + 3/log2 3) / (3 + 2/log2 3)
    assert scores["ndcg%20"] == pytest.approx(100 * (2 + 3 / math.log2(3)) / (3 + 2 / math.log2(3)))
    assert scores["ndcg@10"] == pytest.approx(ndcg(10))


def test_random_pools_match_the_definitions_and_facets_average_their_own(tmp_path):
    """Against a direct numpy transcription of the collection's definitions, on random pools and
    distances with many ties."""
    rng = np.random.default_rng(0)
    size, pools = 300, []
    for number in range(12):
        candidates = rng.choice(np.arange(12, size), size=int(rng.integers(5, 60)), replace=False)
        grades = rng.integers(0, 4, size=len(candidates))
        grades[0] = 2  # every pool has a relevant candidate
        pools.append(
            {
                "query_id": str(number),
                "facet": ["background", "method"][number % 2],
                "candidates": [str(item) for item in candidates],
                "relevance": grades.tolist(),
            }
        )
    loaded = pools_of(tmp_path, pools, size)
    rows = [rng.integers(0, 8, size=size).astype(float) for _ in pools]
    scores = pool_scores(rows, loaded)

    expected = {"map": [], "ndcg%20": [], "ndcg@10": []}
    for pool, row in zip(pools, rows, strict=True):
        candidates = np.array([int(item) for item in pool["candidates"]])
        grades = np.array(pool["relevance"])
        ranked = grades[np.argsort(row[candidates], kind="stable")]
        relevant = np.flatnonzero(ranked >= 2) + 1
        expected["map"].append(100 * np.mean(np.arange(1, len(relevant) + 1) / relevant))
        for name, k in (("ndcg%20", max(1, int(0.2 * len(grades)))), ("ndcg@10", 10)):
            discount = 1 / np.log2(np.arange(2, k + 2))
            dcg = (ranked[:k] * discount[: len(ranked[:k])]).sum()
            ideal = (np.sort(grades)[::-1][:k] * discount[: len(grades[:k])]).sum()
            expected[name].append(100 * dcg / ideal)
    for metric, values in expected.items():
        np.testing.assert_allclose(scores.values[metric], values, rtol=1e-9)
    summary = scores.summary()
    assert summary["method_map"] == pytest.approx(np.mean(expected["map"][1::2]))
    assert summary["background_ndcg@10"] == pytest.approx(np.mean(expected["ndcg@10"][0::2]))
    assert summary["map"] == pytest.approx(np.mean(expected["map"]))
