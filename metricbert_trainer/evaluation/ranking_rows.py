"""What ranking does to rows of distances, in NumPy alone: each row standardised over its query's
candidates, rows fused by weight, a row's head taken in a stable order.

The scorers (``hybrid``, ``shared_neighbours``) and a kept index's lookup (``item_index``) rank
with these same functions, so that an answer read from the index is the scorers' own; and this
module imports nothing but NumPy, so that the lookup starts in a fraction of a second.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def standardised_rows(rows: np.ndarray, queries: Sequence[int]) -> np.ndarray:
    """Each row of ``rows`` ([Q, N] distances from ``queries[i]``) minus its mean over the other
    items, divided by their standard deviation; a row without spread becomes zeros."""
    rows = np.asarray(rows, dtype=np.float32)
    queries = np.asarray(queries, dtype=np.int64)
    candidates = np.ones(rows.shape, dtype=bool)
    candidates[np.arange(len(queries)), queries] = False
    count = np.maximum(candidates.sum(axis=1, keepdims=True), 1)
    mean = np.where(candidates, rows, 0).sum(axis=1, keepdims=True, dtype=np.float64) / count
    spread = np.sqrt(
        np.where(candidates, (rows - mean) ** 2, 0).sum(axis=1, keepdims=True, dtype=np.float64) / count
    )
    return standardised(rows, mean, spread).astype(np.float32)


def standardised(values: np.ndarray, mean: np.ndarray, spread: np.ndarray) -> np.ndarray:
    """``(values - mean) / spread``; a row without spread becomes zeros: it does not move the
    ranking."""
    return (values - mean) / np.where(spread > 0, spread, np.inf)


def fuse_rows(parts: Sequence[tuple[np.ndarray, float]], queries: Sequence[int]) -> np.ndarray:
    """The weighted sum of distance rows ``[Q, N]`` from ``queries``, each standardised first."""
    return sum(weight * standardised_rows(rows, queries) for rows, weight in parts)


def stable_head(row: np.ndarray, k: int) -> np.ndarray:
    """``np.argsort(row, kind="stable")[:k]`` without sorting the whole row: every entry below the
    ``k``-th smallest value, then the first of those equal to it, ordered. A catalog of many copies
    of its items ties at nearly every row's ``k``-th distance, where a whole stable sort is
    ``N log N`` work a row and this is linear. A row of fewer than ``k`` numbers (NaN, which sorts
    last) is sorted whole."""
    numbers = row[~np.isnan(row)]
    if len(numbers) < k:
        return np.argsort(row, kind="stable")[:k]
    kth = np.partition(numbers, k - 1)[k - 1]
    below = np.flatnonzero(row < kth)
    chosen = np.concatenate([below, np.flatnonzero(row == kth)[: k - len(below)]])
    return chosen[np.lexsort((chosen, row[chosen]))]
