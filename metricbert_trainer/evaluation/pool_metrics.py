"""Metrics of rankings inside graded pools (``data.graded_pools``), in percent.

Each pool is ranked on its own: its candidates ordered by their distance from the query item
(ascending; ties keep the pool's order), never the whole catalog. Per pool, as the CSFCube
collection defines them:

* **MAP**: average precision, a candidate relevant when its grade is 2 or more;
* **NDCG%20**: NDCG at k = int(0.2 x pool size) (at least 1), gains = the grades, discount
  1 / log2(rank + 1), the ideal order from the pool's own grades;
* **NDCG@10**: the same at k = 10.

Each is then averaged over pools (each pool weighs once), over all pools and over the pools of
each facet. The metrics themselves are computed by ``ir_measures`` (trec_eval's definitions,
through ``pytrec_eval``): our code only turns distances into a ranking, so the numbers are the
ones other IR work reports. trec_eval breaks ties by item id, not by pool order, so each
candidate is handed a distinct score: its place in our ranking.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import ir_measures
import numpy as np
from ir_measures import AP, Qrel, ScoredDoc, nDCG

from metricbert_trainer.data.graded_pools import GradedPool, GradedPools

POOL_METRICS = ("map", "ndcg%20", "ndcg@10")
RELEVANT_GRADE = 2
POOL_SHARE = 0.2


def pool_cutoff(size: int) -> int:
    """NDCG%20's cut-off for a pool of ``size`` candidates."""
    return max(1, int(POOL_SHARE * size))


def ranked_pool(distances: np.ndarray, pool: GradedPool) -> np.ndarray:
    """The pool's candidate positions, nearest first, from the query's ``distances`` to every
    catalog item; ties keep the pool's order."""
    distances = np.asarray(distances, dtype=np.float64)[pool.candidates]
    if np.isnan(distances).any():
        raise ValueError(f"The distances of the pool at {pool.where} contain NaN; check the item vectors.")
    return np.argsort(distances, kind="stable")


@dataclass(frozen=True)
class PoolScores:
    """Each metric of ``POOL_METRICS`` per pool (percent), in the pools' order."""

    pools: tuple[GradedPool, ...]
    values: dict[str, np.ndarray]

    def summary(self) -> dict[str, float]:
        """The mean of each metric over all pools, then over each facet's (``FACET_METRIC`` keys)."""
        facets = list(dict.fromkeys(pool.facet for pool in self.pools))
        means = {metric: float(np.mean(values)) for metric, values in self.values.items()}
        if facets != [""]:
            for facet in facets:
                chosen = np.array([pool.facet == facet for pool in self.pools])
                means.update(
                    {
                        facet_metric(facet, metric): float(np.mean(values[chosen]))
                        for metric, values in self.values.items()
                    }
                )
        return means


def facet_metric(facet: str, metric: str) -> str:
    """The summary's key of ``metric`` over the pools of ``facet``."""
    return f"{facet}_{metric}"


def pool_scores(rows: Sequence[np.ndarray], pools: GradedPools) -> PoolScores:
    """Per-pool metrics from ``rows[i]``, the distances from ``pools.pools[i]``'s query to every item."""
    if len(rows) != len(pools.pools):
        raise ValueError(f"Got {len(rows)} distance rows for {len(pools.pools)} pools.")
    qrels, run, cutoffs = [], [], {}
    for number, (pool, row) in enumerate(zip(pools.pools, rows, strict=True)):
        query = str(number)
        order = ranked_pool(row, pool)
        run.extend(
            ScoredDoc(query, str(position), float(len(order) - rank)) for rank, position in enumerate(order)
        )
        qrels.extend(Qrel(query, str(position), int(grade)) for position, grade in enumerate(pool.grades))
        cutoffs.setdefault(pool_cutoff(len(order)), set()).add(query)
    found: dict[tuple[str, str], float] = {}
    for metric in ir_measures.iter_calc([AP(rel=RELEVANT_GRADE), nDCG @ 10], qrels, run):
        found[(metric.query_id, "map" if metric.measure == AP(rel=RELEVANT_GRADE) else "ndcg@10")] = (
            metric.value
        )
    for cutoff, queries in cutoffs.items():
        subset_qrels = [qrel for qrel in qrels if qrel.query_id in queries]
        subset_run = [doc for doc in run if doc.query_id in queries]
        for metric in ir_measures.iter_calc([nDCG @ cutoff], subset_qrels, subset_run):
            found[(metric.query_id, "ndcg%20")] = metric.value
    values = {
        metric: 100.0
        * np.array([found.get((str(number), metric), 0.0) for number in range(len(pools.pools))])
        for metric in POOL_METRICS
    }
    return PoolScores(pools=pools.pools, values=values)


def pool_rows(distance_rows: np.ndarray, queries: Sequence[int], pools: GradedPools) -> list[np.ndarray]:
    """Each pool's row of ``distance_rows`` (one row per item of ``queries``)."""
    position = {query: row for row, query in enumerate(queries)}
    return [distance_rows[position[pool.query]] for pool in pools.pools]
