"""Every item's recommendations searched among candidates: ``N * C`` distances instead of ``N^2``.

``recommendations`` ranks every item against every other under the command's ranking, which is
exact and grows with ``N^2``: tens of minutes at a hundred thousand items, about a day at a million
on two cores (docs/evaluation.md).
Here each item's recommendations are searched among a pool: its ``candidates`` nearest items under
the encoder (one FAISS index of its unit views, ``candidate_lists.candidate_pools``) and, when the
ranking re-ranks by shared neighbours, the items of its own neighbour list. When those lists were
themselves searched among at least ``candidates`` of the encoder's nearest, by the same index,
their search serves (``SharedNeighbourScorer.searched_lists`` keeps it, in memory and in the lists
cache): at a million items that skips building the index and searching it, about half the call. The pool is scored by
the whole ranking: the fusion's parts, each standardised per item, and the re-ranking's overlaps.
Those standardisations need each item's mean and spread over the whole catalog: the fusion's parts
and the base ranking's are estimated on ``sample`` items drawn at random, the same for every item
(about ``1 / sqrt(2 * sample)`` relative error), the overlaps' are exact (an item overlaps only
the few items that share a neighbour with it, which a sparse product finds). So an item's
recommendations are the exact command's wherever they lie in its pool, and its distances are the
exact command's to that estimate; what the pool misses is measured as recall (docs/evaluation.md).
With every other item a candidate and in the sample, the result is the exact one (tested).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import numpy as np
from scipy import sparse

from metricbert_trainer.base.distances import Distance
from metricbert_trainer.data.catalog import Catalog
from metricbert_trainer.evaluation.candidate_lists import (
    CHUNK,
    DEFAULT_FAISS_INDEX,
    DEFAULT_FAISS_PARAMETERS,
    DEFAULT_SAMPLE,
    PartViews,
    PreparedPart,
    candidate_pools,
    part_distances,
    pooled_fusion,
    prepared_parts,
    prepared_ranker,
    sample_standardised,
    search_settings,
    spread_sample,
)
from metricbert_trainer.evaluation.hybrid import FusedScorer
from metricbert_trainer.evaluation.neighbours import TopK
from metricbert_trainer.evaluation.ranking_rows import standardised
from metricbert_trainer.evaluation.scorers import Scorer
from metricbert_trainer.evaluation.shared_neighbours import (
    SearchedLists,
    SharedNeighbourScorer,
    membership,
    shared_counts,
)

logger = logging.getLogger(__name__)


def candidate_nearest_chunks(
    scorer: Scorer,
    catalog: Catalog,
    k: int,
    candidates: int,
    *,
    sample: int = DEFAULT_SAMPLE,
    seed: int = 0,
    chunk: int = CHUNK,
    backend: str = "faiss",
    faiss_index: str = DEFAULT_FAISS_INDEX,
    faiss_parameters: str = DEFAULT_FAISS_PARAMETERS,
    items: np.ndarray | None = None,
) -> Iterator[tuple[np.ndarray, TopK]]:
    """``(rows, TopK)`` for every item of ``items`` (the whole catalog by default), ``chunk`` items
    at a time: each item's ``k`` nearest other items under ``scorer`` (a vector scorer, a fusion of
    them, or either re-ranked by shared neighbours) among its pool (this module's docstring),
    nearest first, ties in catalog order. ``backend`` and the FAISS settings search the pools
    (``candidate_lists.candidate_pools``). A share of ``items`` gets the rows the whole catalog's
    call gives those items: the index, the lists and the sampled spreads are the whole catalog's."""
    if not 0 < k <= candidates:
        raise ValueError(f"Need 0 < k ({k}) <= candidates ({candidates}).")
    reranking = scorer if isinstance(scorer, SharedNeighbourScorer) else None
    base = reranking.base if reranking else scorer
    prepared = prepared_parts(base, catalog)
    count = len(catalog)
    members = lists = earlier = None
    if reranking and reranking.reranks(catalog):
        search = search_settings(backend, faiss_index, faiss_parameters)
        lists, earlier = reranking_lists(reranking, catalog, prepared, candidates, search, items)
        sets = membership(lists)
        members = (sets, sets.T.tocsr())  # transposed once, not once per chunk
    parts = [(part.distance, weight, vectors) for part, weight, vectors in prepared]
    views, pools = candidate_pools(
        parts,
        candidates,
        backend=backend,
        faiss_index=faiss_index,
        faiss_parameters=faiss_parameters,
        items=items,
        searched=earlier,
    )
    weighed = [(distance, weight) for distance, weight, _ in parts]
    # A fusion's parts are standardised and summed; a single scorer ranks by its own distance.
    standardised = isinstance(base, FusedScorer)
    drawn = spread_sample(count, sample, seed)
    for searched, searched_pools in pools:
        for start in range(0, len(searched), chunk):
            rows = searched[start : start + chunk]
            pool = searched_pools[start : start + chunk]
            if lists is not None:
                pool = np.concatenate([pool, lists[rows]], axis=1)
            base_distances = pool_distances(weighed, views, rows, pool, drawn, standardised)
            distances = (
                reranked_pool(base_distances, members, rows, pool, reranking.weight)
                if members is not None
                else base_distances[0]
            )
            distances[repeated_in_row(pool)] = np.inf
            order = np.lexsort((pool, distances), axis=1)[:, :k]
            yield (
                rows,
                TopK(
                    indices=np.take_along_axis(pool, order, axis=1),
                    distances=np.take_along_axis(distances, order, axis=1).astype(np.float32),
                ),
            )


def reranking_lists(
    reranking: SharedNeighbourScorer,
    catalog: Catalog,
    prepared: Sequence[PreparedPart],
    candidates: int,
    search: tuple[str, ...],
    items: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """``reranking``'s lists of every item (its ``prepared`` base parts) and, when they serve as
    this table's pools (``lists_candidates``), the candidates of ``items`` (default every item) they
    were searched among: a shard keeps its own rows of those, not the whole catalog's."""
    listed = reranking.searched_lists(
        prepared_ranker(reranking.base, prepared), catalog, prepared, pools=True
    )
    earlier = lists_candidates(reranking, listed, candidates, search)
    if earlier is not None and items is not None:
        earlier = earlier[items]
    return listed.lists, earlier


def lists_candidates(
    reranking: SharedNeighbourScorer,
    listed: SearchedLists,
    candidates: int,
    search: tuple[str, ...],
) -> np.ndarray | None:
    """The candidates ``reranking``'s lists were searched among, when they serve as this table's:
    the same ``search`` (``candidate_lists.search_settings``) of the same first part (both come
    from one ``prepared_parts``, which leaves parts of weight 0 out), at least ``candidates`` of
    them; else ``None``."""
    own_search = search_settings(
        reranking.candidate_backend, reranking.faiss_index, reranking.faiss_parameters
    )
    if listed.pools is None or own_search != search or listed.pools.shape[1] < candidates:
        return None
    logger.info(
        "Candidates: the first %d of the %d each shared-neighbour list was searched among.",
        candidates, listed.pools.shape[1],
    )  # fmt: skip
    return listed.pools


def pool_distances(
    parts: Sequence[tuple[Distance, float]],
    views: PartViews,
    rows: np.ndarray,
    pool: np.ndarray,
    drawn: np.ndarray,
    standardised: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """The base ranking's distances from ``rows`` to their ``pool`` and to the ``drawn`` items
    (NaN at the row's own item): a fusion's (``candidate_lists.pooled_fusion``) when
    ``standardised``, else the single part's own summed distance, as ``Scorer.row_ranker`` ranks."""
    if standardised:
        return pooled_fusion(parts, views, rows, pool, drawn)
    (distance, _), part_views = parts[0], views[0]
    return part_distances(part_views, distance, rows, pool, drawn)


def reranked_pool(
    base: tuple[np.ndarray, np.ndarray],
    members: tuple[sparse.csr_matrix, sparse.csr_matrix],
    rows: np.ndarray,
    pool: np.ndarray,
    weight: float,
) -> np.ndarray:
    """``shared_neighbours.reranked_rows`` over each row's pool: the base distances standardised
    by their mean and spread over the drawn items, the overlaps by theirs over every other item.
    ``members``: the lists' ``membership`` and its transpose as CSR."""
    pooled, drawn = base
    standardised_base, _ = sample_standardised(pooled, drawn)
    overlaps, overlap_mean, overlap_spread = pool_overlaps(*members, rows, pool)
    return (1 - weight) * standardised_base - weight * standardised(overlaps, overlap_mean, overlap_spread)


def pool_overlaps(
    members: sparse.csr_matrix, transposed: sparse.csr_matrix, rows: np.ndarray, pool: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The Jaccard overlaps of each row's set with its pool items' (``shared_neighbours.overlap_rows``
    at those columns), and each row's exact mean and spread of overlaps over every other item: the
    overlap is 0 except with the items that share a member, which the sparse product lists.
    ``transposed``: ``members.T`` as CSR."""
    count = members.shape[0]
    size = members[0].sum()
    overlaps = shared_counts(members, rows, transposed)
    overlaps.data = overlaps.data / (2 * size - overlaps.data)
    # Every item overlaps itself by 1, which the standardisation leaves out (as standardised_rows).
    total = np.asarray(overlaps.sum(axis=1)).ravel() - 1.0
    squares = np.asarray(overlaps.multiply(overlaps).sum(axis=1)).ravel() - 1.0
    others = max(count - 1, 1)
    mean = total / others
    spread = np.sqrt(np.maximum(squares / others - mean**2, 0.0))
    pooled = np.asarray(overlaps[np.repeat(np.arange(len(rows)), pool.shape[1]), pool.ravel()]).reshape(
        pool.shape
    )
    return pooled, mean[:, None], spread[:, None]


def repeated_in_row(pool: np.ndarray) -> np.ndarray:
    """Where an item appears in its row of ``pool`` after an earlier position of the same row."""
    order = np.argsort(pool, axis=1, kind="stable")
    ordered = np.take_along_axis(pool, order, axis=1)
    repeated = np.zeros(pool.shape, dtype=bool)
    np.put_along_axis(
        repeated,
        order,
        np.concatenate([np.zeros((len(pool), 1), bool), ordered[:, 1:] == ordered[:, :-1]], 1),
        1,
    )
    return repeated
