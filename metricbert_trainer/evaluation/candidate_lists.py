"""Shared-neighbour lists from candidates: the fused ranking's nearest items, searched among the
encoder's nearest.

Exact lists (``shared_neighbours.neighbour_lists``) compare every item with every other under the
fused ranking: ``N^2`` distances, TF-IDF's among them, hours at a million items. Most of an item's
nearest items under the hybrid are among its nearest under the encoder alone, which an index finds
without comparing every pair (``neighbours.top_k``, exact or FAISS). Here each item's
``candidates`` nearest items under the fusion's first part (the encoder) are re-scored by the whole
fusion and the ``neighbours`` nearest kept. The fusion standardises each part's row over all the
query's candidates (``ranking_rows.standardised_rows``); here each part's mean and spread per row come
from ``sample`` items drawn at random, the same for every row, which estimates them to about
``1 / sqrt(2 * sample)``. With every item a candidate and in the sample, the lists are the exact
ones (tested).

With the ``faiss`` backend the index is built once over the encoder's unit views, side by side in
one matrix whose column slices serve the re-scoring too, and searched ``SEARCH_CHUNK`` items at a
time, each chunk's candidates re-scored at once: no copy of the views beyond that matrix, which an
HNSW index's own copy then replaces (``indexed_views``), and no ``[N, candidates]`` array
(``neighbours.top_k`` kept both when the lists were first searched through it, and at a million
items ran out of 24 GiB; docs/scale_out.md). Views made by ``indexed_unit_rows`` (training's
teacher) are the index's own storage, so not even that matrix is held apart from it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np
from scipy import sparse
from sklearn.preprocessing import normalize

from metricbert_trainer.base.distances import Distance
from metricbert_trainer.data.catalog import Catalog
from metricbert_trainer.evaluation.hybrid import FusedScorer, fused_ranker
from metricbert_trainer.evaluation.neighbours import (
    BLOCK_BYTES,
    column_ranges,
    empty_index,
    filled_in_chunks,
    flat_storage,
    index_storage_rows,
    inner_product_index,
    is_unit_scaled,
    nearest_in_rows,
    search_at_least,
    stacked_columns,
    top_k,
    unit_view,
)
from metricbert_trainer.evaluation.ranking_rows import standardised
from metricbert_trainer.evaluation.scorers import Scorer, VectorScorer

logger = logging.getLogger(__name__)

# Items whose candidates are re-scored at a time ([CHUNK, candidates] pairs per view).
CHUNK = 128
# Items whose candidates one FAISS search returns ([SEARCH_CHUNK, candidates + 1] ids and scores).
SEARCH_CHUNK = 8192
DEFAULT_SAMPLE = 2048
# The FAISS index the candidates are searched in, and its search settings: ``candidate_pools``'s
# defaults, and those of the shared-neighbour re-ranking and the candidate recommendations.
DEFAULT_FAISS_INDEX = "HNSW32"
DEFAULT_FAISS_PARAMETERS = "efSearch=256"
# Items whose unit rows ``indexed_unit_rows`` gathers and adds to the index at a time (192 MiB of
# two MiniLM fields): a catalog of up to this many items is added in one call, as before.
INDEX_ROWS = 65536


def fused_parts(scorer: Scorer) -> list[tuple[VectorScorer, float]]:
    """``scorer``'s vector scorers and their weights: itself, or a fusion's weighted parts."""
    parts = list(scorer.parts) if isinstance(scorer, FusedScorer) else [(scorer, 1.0)]
    parts = [(part, weight) for part, weight in parts if weight]
    if not parts:
        raise ValueError(f"{scorer.name}: every weight is 0, so nothing ranks the items.")
    for part, _ in parts:
        if not isinstance(part, VectorScorer):
            raise ValueError(
                f"{part.name}: lists from candidates need vector scorers with an angular or cosine distance."
            )
        check_searchable(part.distance, part.name)  # before the parts' vectors are computed
    return parts


def check_searchable(distance: Distance, name: str) -> None:
    """Raises unless ``distance`` ranks by cosines, which the candidates' search and re-scoring read."""
    if distance not in (Distance.ANGULAR, Distance.COSINE):
        raise ValueError(
            f"{name}: lists from candidates need an angular or cosine distance; got {distance.value}."
        )


# A vector scorer of a fusion, its weight and its vectors of one catalog.
PreparedPart = tuple[VectorScorer, float, dict]


def prepared_parts(scorer: Scorer, catalog: Catalog) -> list[PreparedPart]:
    """``fused_parts`` with each part's vectors of ``catalog``, computed once (encoding, fitting)
    for both the candidate lists and ``prepared_ranker``, and scaled to unit length: every
    part's distance reads only cosines (``fused_parts`` checks), so the unit copy is all that is
    kept, and what reads the parts after (``candidate_pools``, the FAISS index's matrix) uses it
    without copying it again: a table call at a million items held the raw vectors beside their
    unit copy until it ended (docs/scale_out.md)."""
    return [(part, weight, unit_vectors(part.item_vectors(catalog))) for part, weight in fused_parts(scorer)]


class UnitViews(dict):
    """A part's views at unit length, by name (``unit_vectors``). ``stacked``: when the views are
    dense, the one float32 matrix they are the column slices of, side by side, which is what a
    FAISS index of the part searches (``stacked_unit_views`` takes it as it is); else ``None``.
    ``index``: a FAISS index of ``stacked``'s rows (``indexed_unit_rows``, ``indexed_views``),
    whose own flat storage ``stacked`` is when the factory keeps one (HNSW, ``Flat``; not IVF), with
    the ``(factory, parameters)`` it was built with in ``index_settings``; else ``None``."""

    stacked: np.ndarray | None = None
    index: object | None = None
    index_settings: tuple[str, str] | None = None


def unit_vectors(vectors: dict) -> UnitViews:
    """``vectors`` with each view's rows scaled to unit length (``unit_view``); dense views as the
    column slices of one matrix (``stacked_unit_views``), so that searching them copies nothing."""
    if any(sparse.issparse(view) for view in vectors.values()):
        return UnitViews(zip(vectors, unit_views(vectors), strict=True))
    stacked, slices = stacked_unit_views(vectors)
    unit = UnitViews(zip(vectors, slices, strict=True))
    unit.stacked = stacked
    return unit


def prepared_ranker(
    scorer: Scorer, prepared: Sequence[PreparedPart]
) -> Callable[[Sequence[int]], np.ndarray]:
    """``scorer.row_ranker`` of the catalog ``prepared`` was computed for, without computing
    its vectors again."""
    if not isinstance(scorer, FusedScorer):
        part, _, vectors = prepared[0]
        return part.ranker(vectors)
    return fused_ranker([(part.ranker(vectors), weight) for part, weight, vectors in prepared])


def unit_views(vectors: dict) -> list[np.ndarray | sparse.csr_matrix]:
    """Each view's rows scaled to unit length (``unit_view``)."""
    return [unit_view(view) for view in vectors.values()]


def stacked_unit_views(vectors: dict) -> tuple[np.ndarray, list[np.ndarray]]:
    """The dense views' unit rows side by side in one float32 matrix (its inner products are sums
    of per-view cosines, what a FAISS index of it searches), and each view as a column slice of it,
    filled one view at a time: a single copy of the vectors, or none when ``vectors`` are such
    slices already (``unit_vectors``)."""
    if isinstance(vectors, UnitViews) and vectors.stacked is not None:
        return vectors.stacked, list(vectors.values())
    if any(sparse.issparse(view) for view in vectors.values()):
        raise ValueError("The 'faiss' backend searches dense vectors; use backend='exact'.")
    count = np.shape(next(iter(vectors.values())))[0]
    stacked, slices = stacked_columns(count, [np.shape(view)[1] for view in vectors.values()])
    for view, columns in zip(vectors.values(), slices, strict=True):
        columns[:] = view
        if not is_unit_scaled(np.asarray(view)):
            normalize(columns, copy=False)  # in place: no [N, width] copy beside the matrix
    return stacked, slices


def indexed_views(vectors: dict, factory: str, parameters: str) -> UnitViews:
    """``vectors`` at unit length (``unit_vectors``) with a FAISS index of them built by ``factory``
    and searched with ``parameters``. Unit views given (``UnitViews``, as ``prepared_parts`` keeps
    them) get the index themselves, or keep the one they have with those settings, and when the
    index holds its rows in a flat storage (HNSW, ``Flat``) their views become column slices of it
    and their own matrix is let go: ``evaluate`` and ``recommend`` then hold one copy of the
    scaled vectors, not that matrix and the index's copy of it (3 GiB each at a million items of
    two 384-wide views). The floats are the same, so whatever reads the views reads the same."""
    if isinstance(vectors, UnitViews) and vectors.index_settings == (factory, parameters):
        return vectors
    unit = (
        vectors if isinstance(vectors, UnitViews) and vectors.stacked is not None else unit_vectors(vectors)
    )
    index = inner_product_index(unit.stacked, factory, parameters)
    storage = flat_storage(index)
    if storage is None:
        unit.index, unit.index_settings = index, (factory, parameters)
        return unit
    widths = [np.shape(view)[1] for view in unit.values()]
    return _held_by_index(unit, widths, index, storage, (factory, parameters))


def _held_by_index(
    unit: UnitViews, widths: Sequence[int], index, storage, settings: tuple[str, str]
) -> UnitViews:
    """``unit`` (its views of ``widths``, in order) pointed at column slices of the flat
    ``storage`` of ``index``, built with ``settings``; the arrays it held before are let go."""
    stacked = index_storage_rows(index, storage)
    unit.update(zip(list(unit), (stacked[:, columns] for columns in column_ranges(widths)), strict=True))
    unit.stacked, unit.index, unit.index_settings = stacked, index, settings
    return unit


def unit_rows_of(source: np.ndarray, rows: dict[str, np.ndarray]) -> UnitViews:
    """Views that are rows of one float32 matrix: view ``name`` is ``source[rows[name]]``, scaled to
    unit length, each a column slice of one matrix (``UnitViews.stacked``), as ``unit_vectors``
    gives them from the views themselves. The rows are gathered straight into the matrix, so no
    view is ever held apart from it: training's teacher reads the start's vectors of every catalog
    text from the guide's cache this way (at ten million items each view held apart would be
    another 14 GiB; docs/scale_out.md). ``source`` may be float16 (the guide's cache in half the
    memory): its rows are cast as they are gathered, never the whole of it."""
    source = np.asarray(source)
    count = len(next(iter(rows.values())))
    stacked, slices = stacked_columns(count, [source.shape[1]] * len(rows))
    for picked, columns in zip(rows.values(), slices, strict=True):
        take_rows_into(source, picked, columns)
        if not is_unit_scaled(columns):
            normalize(columns, copy=False)
    unit = UnitViews(zip(rows, slices, strict=True))
    unit.stacked = stacked
    return unit


def indexed_unit_rows(
    source: np.ndarray,
    rows: dict[str, np.ndarray],
    factory: str = DEFAULT_FAISS_INDEX,
    parameters: str = DEFAULT_FAISS_PARAMETERS,
    chunk_rows: int = INDEX_ROWS,
) -> UnitViews:
    """``unit_rows_of(source, rows)``, held by a FAISS index of them (``factory``, searched with
    ``parameters``) rather than beside it: the rows are gathered, scaled and added ``chunk_rows``
    items at a time, and the views are column slices of the index's own flat storage. Why: the
    candidate search needs the index, the re-scoring needs the views, and both are the same
    floats; holding them twice was a third copy of the start's vectors beside the guide's cache
    and the index, 29 GiB per process at ten million MiniLM items (docs/scale_out.md). A catalog
    of more than ``chunk_rows`` items is added in several calls, which builds another HNSW graph
    than one call (at 300,000 items its lists held 0.007 less of the exact lists' items), and
    each chunk is scaled on its own (a chunk already at unit length is kept as it is, where the
    whole matrix would be scaled: a rounding's difference). A factory without a flat storage in
    item order (IVF) gets ``unit_rows_of``'s views, and the search builds its index from them as
    before."""
    count = len(next(iter(rows.values())))
    index = empty_index(np.shape(source)[1] * len(rows), factory, parameters)
    storage = flat_storage(index)
    if not index.is_trained or storage is None:
        return unit_rows_of(source, rows)
    # Every add grows the storage's byte vector; sized once (and emptied, which keeps its capacity)
    # it never reallocates, where a doubling vector held its old and new buffers at once.
    storage.codes.resize(count * storage.code_size)
    storage.codes.resize(0)
    filled_in_chunks(
        index,
        count,
        lambda start, stop: (
            unit_rows_of(source, {name: picked[start:stop] for name, picked in rows.items()}).stacked
        ),
        chunk_rows,
        parameters,
    )
    widths = [np.shape(source)[1]] * len(rows)
    return _held_by_index(UnitViews.fromkeys(rows), widths, index, storage, (factory, parameters))


def take_rows_into(source: np.ndarray, rows: np.ndarray, out: np.ndarray) -> None:
    """``out[:] = source[rows]`` without the ``[len(rows), H]`` temporary that indexing makes
    (``out`` may be a column slice of a larger matrix); a ``source`` of another dtype (the guide's
    float16 cache into float32 columns) is cast ``CAST_ROWS`` rows at a time."""
    if len(rows) and not 0 <= np.min(rows) <= np.max(rows) < len(source):
        raise IndexError(f"Rows must lie in 0..{len(source) - 1}, the source's rows.")
    if source.dtype != out.dtype:
        # np.take's ``out`` must have the source's dtype; a chunk's temporary stays small.
        for start in range(0, len(rows), CAST_ROWS):
            out[start : start + CAST_ROWS] = source[rows[start : start + CAST_ROWS]]
        return
    # mode "clip" writes into ``out`` directly ("raise" buffers a whole copy first), and would
    # silently clip a row out of range, which the check above refuses instead.
    np.take(source, rows, axis=0, out=out, mode="clip")


# Rows gathered and cast at a time by ``take_rows_into`` when the dtypes differ (6 MiB of float16
# MiniLM vectors).
CAST_ROWS = 8192


def faiss_candidate_pools(
    indexed: UnitViews,
    candidates: int,
    chunk: int = SEARCH_CHUNK,
    items: np.ndarray | None = None,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(rows, [len(rows), candidates])`` for every ``chunk`` of ``items`` (every item by
    default): each item's ``candidates`` nearest other items by the summed cosine of its unit
    views, from the FAISS index of every item that ``indexed`` holds (``indexed_views``); the
    index's order, the item itself left out (the last one found when the search missed the item
    itself). An item the index returns too few for (a catalog of many identical items leaves an
    HNSW graph with parts its search cannot reach) is compared with every item instead
    (``exact_candidates``), and a warning says how many were; the search raised for them. An HNSW
    index searched with no ``efSearch`` explores as many items as it returns (``search_at_least``)."""
    stacked, index, (factory, parameters) = indexed.stacked, indexed.index, indexed.index_settings
    search_at_least(index, parameters, candidates + 1)
    items = np.arange(len(stacked)) if items is None else np.asarray(items)
    short = 0
    for start in range(0, len(items), chunk):
        rows = items[start : start + chunk]
        _, found = index.search(stacked[rows], candidates + 1)  # +1: the item itself
        others = found != rows[:, None]
        kept = np.take_along_axis(found, np.argsort(~others, axis=1, kind="stable"), axis=1)[:, :candidates]
        missed = np.flatnonzero((kept < 0).any(axis=1))
        if len(missed):
            kept[missed] = exact_candidates(stacked, rows[missed], candidates)
            short += len(missed)
        yield rows, kept
    if short:
        logger.warning(
            "The FAISS index %r returned fewer than %d candidates for %d of %d items (the copies of an item "
            "that a catalog holds many of can be linked among themselves alone in an HNSW graph, which a wider "
            "efSearch does not mend); their candidates were found by comparing them with every item.",
            factory,
            candidates,
            short,
            len(items),
        )


def exact_candidates(stacked: np.ndarray, rows: np.ndarray, candidates: int) -> np.ndarray:
    """Each of ``rows``' ``candidates`` nearest other items by the summed cosine of the unit views
    ``stacked`` side by side (the order a FAISS index of them searches in), nearest first, ties in
    catalog order, every item compared: for the items an approximate index found too few for. One
    ``neighbours.BLOCK_BYTES`` block of scores at a time."""
    block = max(1, BLOCK_BYTES // (4 * len(stacked)))
    nearest = np.empty((len(rows), candidates), dtype=np.int64)
    for start in range(0, len(rows), block):
        part = rows[start : start + block]
        negated = stacked[part] @ stacked.T
        np.negative(negated, out=negated)  # a distance: the nearest is the smallest
        nearest[start : start + len(part)] = nearest_in_rows(negated, part, candidates).indices
    return nearest


def list_recall(lists: np.ndarray, exact: np.ndarray) -> float:
    """The share of each row of ``exact`` that the same row of ``lists`` holds, averaged over rows."""
    return float(np.mean([len(set(a) & set(b)) for a, b in zip(lists, exact, strict=True)]) / exact.shape[1])


def pair_distances(views: Sequence, distance: Distance, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """``[len(rows), C]``: the summed per-view distance from item ``rows[i]`` to each item
    ``columns[i, j]`` (unit views from ``unit_views``)."""
    cosines = []
    for view in views:
        if sparse.issparse(view):
            products = view[np.repeat(rows, columns.shape[1])].multiply(view[columns.ravel()])
            cosines.append(np.asarray(products.sum(axis=1)).reshape(columns.shape))
        else:
            cosines.append(np.einsum("rd,rcd->rc", view[rows], view[columns]))
    return summed_distance(cosines, distance)


def sample_distances(views: Sequence, distance: Distance, rows: np.ndarray, drawn: np.ndarray) -> np.ndarray:
    """``[len(rows), len(drawn)]``: the summed per-view distance from each item of ``rows`` to each
    of ``drawn`` (one product per view, the columns being the same for every row)."""
    cosines = []
    for view in views:
        products = view[rows] @ view[drawn].T
        cosines.append(products.toarray() if sparse.issparse(products) else products)
    return summed_distance(cosines, distance)


def summed_distance(cosines: Sequence[np.ndarray], distance: Distance) -> np.ndarray:
    """The per-view cosines turned into ``distance`` and summed over views, in float64."""
    total = 0.0
    for view_cosines in cosines:
        clipped = np.clip(np.asarray(view_cosines, dtype=np.float64), -1.0, 1.0)
        total = total + (np.arccos(clipped) / np.pi if distance is Distance.ANGULAR else 1.0 - clipped)
    return total


def candidate_neighbour_lists(
    scorer: Scorer,
    catalog: Catalog,
    neighbours: int,
    candidates: int,
    *,
    prepared: Sequence[PreparedPart] | None = None,
    **search,
) -> np.ndarray:
    """``[N, neighbours]``: each item's ``neighbours`` nearest other items under ``scorer`` (a
    vector scorer or a fusion of them), searched among its ``candidates`` nearest under the first
    part (``fused_candidate_lists``, which ``search`` configures). ``prepared``: the parts' vectors
    of ``catalog`` (``prepared_parts``), when already computed."""
    prepared = prepared_parts(scorer, catalog) if prepared is None else prepared
    return fused_candidate_lists(
        [(part.distance, weight, vectors) for part, weight, vectors in prepared],
        neighbours,
        candidates,
        **search,
    )


# A part of a fusion as the lists read it: its distance, its weight and its views of the catalog.
FusionPart = tuple[Distance, float, dict]
# Each part's unit views (``unit_views``), the first part's as the index's column slices.
PartViews = list[list]


def search_settings(backend: str, faiss_index: str, faiss_parameters: str) -> tuple[str, ...]:
    """What tells one search of candidates from another: the backend and, for ``faiss``, its index
    and search parameters (the ``exact`` backend reads neither)."""
    return (backend, faiss_index, faiss_parameters) if backend == "faiss" else (backend,)


def candidate_pools(
    parts: Sequence[FusionPart],
    candidates: int,
    *,
    backend: str = "exact",
    faiss_index: str = DEFAULT_FAISS_INDEX,
    faiss_parameters: str = DEFAULT_FAISS_PARAMETERS,
    items: np.ndarray | None = None,
    searched: np.ndarray | None = None,
) -> tuple[PartViews, Iterable[tuple[np.ndarray, np.ndarray]]]:
    """Each part's unit views and ``(rows, [len(rows), candidates])`` pools covering ``items``
    (every item by default): each item's ``candidates`` nearest other items of the whole catalog
    under the first part. ``backend``: ``exact`` compares every pair under the first part's
    distance (``neighbours.top_k``, one pool of all the items), ``faiss`` searches one index of its
    unit views (``faiss_index``, ``faiss_parameters``) by their summed cosine, ``SEARCH_CHUNK``
    items at a time. ``searched``: the candidates of ``items`` from an earlier search of the same
    backend and index, row for row, at least ``candidates`` each, nearest first: their first
    ``candidates`` are the pools, and nothing is searched (FAISS's HNSW explores its ``efSearch``
    nearest whatever count up to it is asked for, so the first of a larger search are a smaller
    one's; docs/evaluation.md compares the two). Every part needs an angular or cosine distance
    (callers leave parts of weight 0 out)."""
    for number, (distance, _, _) in enumerate(parts):
        check_searchable(distance, f"part {number} of the fusion")
    count = np.shape(next(iter(parts[0][2].values())))[0]
    if not 0 < candidates < count:
        raise ValueError(f"Need 0 < candidates ({candidates}) < items ({count}).")
    first_distance, _, first_vectors = parts[0]
    views = [unit_views(vectors) for _, _, vectors in parts[1:]]
    items = np.arange(count) if items is None else np.asarray(items)
    if searched is not None:
        if len(searched) != len(items) or searched.shape[1] < candidates:
            raise ValueError(
                f"The searched candidates ({searched.shape}) must hold at least {candidates} for each of "
                f"{len(items)} items."
            )
        first_views = unit_views(first_vectors)
        pools = [(items, searched[:, :candidates])]
    elif backend == "faiss":
        # FAISS orders by the summed cosine, a close proxy of a sum of angles; the fusion re-scores
        # the candidates anyway, so the index is asked for exactly as many as are kept.
        indexed = indexed_views(first_vectors, faiss_index, faiss_parameters)
        first_views = list(indexed.values())
        pools = faiss_candidate_pools(indexed, candidates, items=items)
    elif backend == "exact":
        first_views = unit_views(first_vectors)
        # Every pair under the first part's distance (neighbours.top_k), all the items as one pool.
        nearest = top_k(first_vectors, first_distance, candidates, queries=items, backend="exact")
        pools = [(items, nearest.indices)]
    else:
        raise ValueError(f"Unknown candidate backend {backend!r}; use 'exact' or 'faiss'.")
    views.insert(0, first_views)
    return views, pools


def spread_sample(count: int, sample: int = DEFAULT_SAMPLE, seed: int = 0) -> np.ndarray:
    """The items each row's spread is estimated on: ``sample`` of the ``count`` drawn at random,
    the same for every row, in catalog order."""
    return np.sort(np.random.default_rng(seed).choice(count, size=min(sample, count), replace=False))


def fused_candidate_lists(
    parts: Sequence[FusionPart],
    neighbours: int,
    candidates: int,
    *,
    sample: int = DEFAULT_SAMPLE,
    seed: int = 0,
    chunk: int = CHUNK,
    pools_out: np.ndarray | None = None,
    items: np.ndarray | None = None,
    **search,
) -> np.ndarray:
    """``[len(items), neighbours]``: each of ``items`` (every item by default), its ``neighbours``
    nearest other items under the fusion of ``parts`` (each part's summed per-view distance,
    standardised per row, weighted and summed), searched among its ``candidates`` nearest under the
    first part (``candidate_pools``, which ``search`` configures), nearest first, ties by catalog
    order. ``pools_out``: an ``[len(items), candidates]`` array each item's candidates are written
    into (NumPy's ``out``), for a caller that reuses the search (``candidate_recommendations``)."""
    parts = [(Distance(distance), weight, vectors) for distance, weight, vectors in parts if weight]
    if not parts:
        raise ValueError("Every part of the fusion weighs 0, so nothing ranks the items.")
    if not 0 < neighbours <= candidates:
        raise ValueError(f"Need 0 < neighbours ({neighbours}) <= candidates ({candidates}).")
    views, pools = candidate_pools(parts, candidates, items=items, **search)
    weighed = [(distance, weight) for distance, weight, _ in parts]
    count = np.shape(views[0][0])[0]
    drawn = spread_sample(count, sample, seed)
    items = np.arange(count) if items is None else np.asarray(items)
    # Where each item's list goes: its place among ``items``.
    place = np.empty(count, dtype=np.int64)
    place[items] = np.arange(len(items))
    lists = np.empty((len(items), neighbours), dtype=np.int64)
    for searched, searched_pools in pools:
        for start in range(0, len(searched), chunk):
            rows, pool = searched[start : start + chunk], searched_pools[start : start + chunk]
            if pools_out is not None:
                pools_out[place[rows]] = pool
            fused, _ = pooled_fusion(weighed, views, rows, pool, drawn)
            order = np.lexsort((pool, fused), axis=1)[:, :neighbours]
            lists[place[rows]] = np.take_along_axis(pool, order, axis=1)
    return lists


def pooled_fusion(
    parts: Sequence[tuple[Distance, float]],
    views: PartViews,
    rows: np.ndarray,
    pool: np.ndarray,
    drawn: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The fusion's distances from each of ``rows`` to its ``pool`` items (``[len(rows), C]``) and
    to the ``drawn`` items (``[len(rows), len(drawn)]``, NaN at the row's own item): each part's
    summed distance standardised by its mean and spread over the ``drawn`` items, weighted and
    summed."""
    fused = np.zeros(pool.shape, dtype=np.float64)
    fused_drawn = np.zeros((len(rows), len(drawn)), dtype=np.float64)
    for (distance, weight), part_views in zip(parts, views, strict=True):
        pooled, sampled = sample_standardised(*part_distances(part_views, distance, rows, pool, drawn))
        fused += weight * pooled
        fused_drawn += weight * sampled
    return fused, fused_drawn


def part_distances(
    views: Sequence, distance: Distance, rows: np.ndarray, pool: np.ndarray, drawn: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """One part's summed distance from each of ``rows`` to its ``pool`` items and to the ``drawn``
    items, NaN at the row's own item (an item's distance to itself is not a candidate's)."""
    others = drawn[None, :] != rows[:, None]
    return (
        pair_distances(views, distance, rows, pool),
        np.where(others, sample_distances(views, distance, rows, drawn), np.nan),
    )


def sample_standardised(pooled: np.ndarray, drawn: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``pooled`` and ``drawn`` (rows of distances, NaN where not a candidate) standardised per row
    by the mean and spread of the row's ``drawn`` values."""
    mean = np.nanmean(drawn, axis=1, keepdims=True)
    spread = np.nanstd(drawn, axis=1, keepdims=True)
    return standardised(pooled, mean, spread), standardised(drawn, mean, spread)
