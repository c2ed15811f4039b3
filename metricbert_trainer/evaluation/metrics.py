"""Ranking metrics over annotated (seed, similar item) pairs: MPR, MRR and HR@k, in percent.

For a seed ``s`` the candidates are every catalog item but ``s``; an annotated item ``a`` has
rank ``r`` (1 = nearest) among them, and with ``C`` candidates

* percentile rank ``PR = 100 * (1 - (r - 1) / (C - 1))``: 100 at the top, 0 at the bottom, 50
  expected from a random order; **MPR** is its mean over all pairs;
* **MRR** is the mean of ``100 / r``;
* **HR@k** is the percentage of pairs with ``r <= k``.

Every metric is a mean over pairs, so a seed with 15 annotations weighs 15 times. Two variants:

* *raw*: ``a`` is ranked among all ``N - 1`` other items, so a seed's other annotated items
  count against it (with 10 annotations at most one can be first);
* *filtered* (the primary numbers): a seed's other annotated items are removed from the
  candidates before ranking ``a`` (``C = N - m`` for ``m`` annotations), as in link-prediction
  evaluation, so a perfect ranker scores 100 on every metric.

Two per-seed metrics of the ranked list's head, averaged over seeds (each seed weighs once),
computed from the raw ranks (every annotated item is relevant, binary relevance):

* **MAP**: the mean over seeds of average precision, ``AP = mean_i (i / r_i)`` over the seed's
  annotated items sorted by rank ``r_1 <= r_2 <= ...``;
* **NDCG@20**: ``DCG@20 / IDCG@20`` with ``DCG@20 = sum over r_i <= 20 of 1 / log2(r_i + 1)``.

Ties get the mean of the ranks they span (the expected rank under random tie-breaking), so a
scorer that cannot tell items apart scores the 50 MPR of a random one, not a perfect 100.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# These metrics as a Hugging Face ``evaluate`` metric: ``evaluate.load(RANKING_METRIC_PATH)``,
# offline (``metricbert_ranking/``, which computes through this module).
RANKING_METRIC_PATH = str(Path(__file__).parent / "metricbert_ranking")


@dataclass(frozen=True)
class PairRanks:
    """Ranks of annotated items (1 = nearest, fractional on ties) and how many candidates each had."""

    ranks: np.ndarray
    candidates: np.ndarray

    @staticmethod
    def concatenate(parts: Sequence[PairRanks]) -> PairRanks:
        return PairRanks(
            ranks=np.concatenate([part.ranks for part in parts]),
            candidates=np.concatenate([part.candidates for part in parts]),
        )


def annotated_ranks(
    distances: np.ndarray, seed: int, annotated: Sequence[int]
) -> tuple[PairRanks, PairRanks]:
    """The raw and filtered ranks of a seed's ``annotated`` items from its ``distances`` to every item.

    ``distances`` is one row ``[N]`` (lower is nearer); the seed's own entry is ignored.
    """
    distances = np.asarray(distances, dtype=np.float64)
    annotated = np.asarray(annotated, dtype=np.int64)
    if np.isnan(distances).any():
        raise ValueError(f"The distances of seed {seed} contain NaN; check the item vectors.")
    if len(annotated) == 0 or len(np.unique(annotated)) != len(annotated) or (annotated == seed).any():
        raise ValueError(
            f"Seed {seed} needs distinct annotated items other than itself; got {annotated.tolist()}."
        )
    num_items = len(distances)
    others = np.sort(np.delete(distances, seed))
    target = distances[annotated]
    nearer = np.searchsorted(others, target, side="left")
    tied = np.searchsorted(others, target, side="right") - nearer - 1  # minus the item itself
    raw = 1.0 + nearer + tied / 2.0

    # The seed's other annotated items, removed from the candidates of the filtered variant.
    nearer_annotated = (target[None, :] < target[:, None]).sum(axis=1)
    tied_annotated = (target[None, :] == target[:, None]).sum(axis=1) - 1
    filtered = raw - nearer_annotated - tied_annotated / 2.0
    count = len(annotated)
    return (
        PairRanks(raw, np.full(count, num_items - 1)),
        PairRanks(filtered, np.full(count, num_items - count)),
    )


def summarize(pairs: PairRanks, ks: Sequence[int] = (10, 100)) -> dict[str, float]:
    """MPR, MRR and HR@k (in percent) of a set of ranked pairs."""
    if len(pairs.ranks) == 0:
        raise ValueError("No annotated pairs to summarise.")
    spread = np.maximum(pairs.candidates - 1, 1)  # one candidate: rank 1 is the top, PR 100
    metrics = {
        "mpr": float(np.mean(100.0 * (1.0 - (pairs.ranks - 1.0) / spread))),
        "mrr": float(np.mean(100.0 / pairs.ranks)),
    }
    for k in ks:
        metrics[f"hr@{k}"] = float(np.mean(pairs.ranks <= k) * 100.0)
    return metrics


NDCG_CUTOFF = 20


def head_metrics(raw: Sequence[PairRanks], cutoff: int = NDCG_CUTOFF) -> dict[str, float]:
    """MAP and NDCG@``cutoff`` (in percent), from each seed's raw ranks."""
    average_precisions, ndcgs = [], []
    for seed_ranks in raw:
        ranks = np.sort(seed_ranks.ranks)
        found = np.arange(1, len(ranks) + 1)
        average_precisions.append(np.mean(found / ranks))
        gains = np.where(ranks <= cutoff, 1.0 / np.log2(ranks + 1.0), 0.0).sum()
        ideal = (1.0 / np.log2(np.arange(1, min(len(ranks), cutoff) + 1) + 1.0)).sum()
        ndcgs.append(gains / ideal)
    return {
        "map": float(np.mean(average_precisions) * 100.0),
        f"ndcg@{cutoff}": float(np.mean(ndcgs) * 100.0),
    }


def ranking_metrics(
    distance_rows: np.ndarray,
    seeds: Sequence[int],
    annotated: Sequence[Sequence[int]],
    ks: Sequence[int] = (10, 100),
) -> dict[str, float]:
    """Filtered metrics (``mpr``, ``mrr``, ``hr@k``), raw ones (``raw_mpr``, ...) and the per-seed
    ``map`` and ``ndcg@20`` in one flat dict.

    ``distance_rows[i]`` holds the distances from ``seeds[i]`` to every item and
    ``annotated[i]`` the indices of its annotated similar items.
    """
    if not (len(distance_rows) == len(seeds) == len(annotated)):
        raise ValueError(
            f"Got {len(distance_rows)} distance rows for {len(seeds)} seeds and {len(annotated)} annotation lists."
        )
    if len(seeds) == 0:
        raise ValueError("No seeds to evaluate.")
    if any(k < 1 for k in ks):
        raise ValueError(f"Every k must be at least 1; got {list(ks)}.")
    ranked = [
        annotated_ranks(row, seed, items)
        for row, seed, items in zip(distance_rows, seeds, annotated, strict=True)
    ]
    raw, filtered = zip(*ranked, strict=True)
    metrics = summarize(PairRanks.concatenate(filtered), ks)
    metrics.update(
        {f"raw_{name}": value for name, value in summarize(PairRanks.concatenate(raw), ks).items()}
    )
    metrics.update(head_metrics(raw))
    return metrics


def ranking_metric_names(ks: Sequence[int] = (10, 100)) -> list[str]:
    """The names ``ranking_metrics`` returns for cut-offs ``ks``, read off its result on the
    smallest ranking there is (one seed, one other item), so the two never disagree."""
    return list(ranking_metrics(np.array([[0.0, 1.0]]), [0], [[1]], ks))
