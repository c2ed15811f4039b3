"""Ranking a catalog against itself: per-view item vectors in, nearest items out.

An item is compared through one or more *views* (one text field each, or the fields joined into
one text) and the distances of the views are summed. With MetricBERT's angular distance and one
view per field this is the paper's Metric_Inf, ``sum_f d(f_s, f_c)``; with one view it is a
single-field or "Mean" ranking. The same code ranks neural embeddings, TF-IDF and LDA vectors,
so the evaluator, the CLI and the baselines cannot drift apart.

Nothing here builds an ``N x N`` matrix: distances are computed for a block of query rows at a
time (about 512 MiB each), which is what lets a 130K-item catalog be ranked in a few GB. When the
ranking is a monotone function of the summed cosine (cosine distance, or any cosine-based
distance over a single view), the top k are picked on the similarity and only those k are turned
into distances, which spares an ``arccos`` over every pair.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from scipy import sparse
from sklearn.preprocessing import normalize as normalize_rows
from sklearn.utils.extmath import row_norms

from metricbert_trainer.base.distances import Distance, cosine_to_distance
from metricbert_trainer.base.huge_pages import collapse_into_huge_pages
from metricbert_trainer.data.catalog import Catalog
from metricbert_trainer.evaluation.ranking_rows import stable_head

logger = logging.getLogger(__name__)

METRIC_INF = "metric_inf"
CONCAT = "concat"
# Bytes of float32 distances computed per block of query rows; peak memory is about two blocks.
BLOCK_BYTES = 512 * 2**20
# Cosine-to-distance conversions and FAISS re-ranking work on row slices of about this size, which
# bounds their temporaries (measured on 2 cores: a little faster than whole blocks, too).
SLICE_BYTES = 64 * 2**20
# How far a float32 row's squared length may lie from 1 for the row to count as unit length
# (``is_unit_scaled``): sklearn's and torch's scaling leave rows within a few 1e-7 of it.
UNIT_TOLERANCE = 1e-5

Matrix = np.ndarray | sparse.spmatrix | sparse.sparray


def catalog_views(catalog: Catalog, mode: str) -> dict[str, list[str]]:
    """The texts each item is represented by under a scoring ``mode``, one list per view.

    ``metric_inf`` gives one view per catalog field (ranked by the sum of the field distances),
    ``concat`` one view of all fields joined by a space (the paper's "Mean" rows), and a field
    name that field alone.
    """
    if mode == METRIC_INF:
        return {field: catalog.texts(field) for field in catalog.fields}
    if mode == CONCAT:
        columns = [catalog.texts(field) for field in catalog.fields]
        return {CONCAT: [" ".join(parts) for parts in zip(*columns, strict=True)]}
    if mode in catalog.fields:
        return {mode: catalog.texts(mode)}
    raise ValueError(
        f"Unknown scoring mode {mode!r}; use {METRIC_INF!r}, {CONCAT!r} or a catalog field {list(catalog.fields)}."
    )


def mode_label(mode: str) -> str:
    """How a mode is named in result tables, after the paper's rows."""
    return {METRIC_INF: "Metric_Inf", CONCAT: "Mean"}.get(mode, mode)


@dataclass(frozen=True)
class TopK:
    """The ``k`` nearest items of each query, nearest first: item indices and their distances."""

    indices: np.ndarray  # [Q, k] int64
    distances: np.ndarray  # [Q, k] float32


def distance_rows(vectors: Mapping[str, Matrix], distance: Distance | str, rows: Sequence[int]) -> np.ndarray:
    """Summed distances from the items ``rows`` to every item, as a float32 ``[len(rows), N]`` array.

    The row of an item includes the item itself; callers that rank exclude it.
    """
    return distance_ranker(vectors, distance)(rows)


def distance_ranker(
    vectors: Mapping[str, Matrix], distance: Distance | str
) -> Callable[[Sequence[int]], np.ndarray]:
    """``distance_rows`` of ``vectors`` for many calls: the views are checked and scaled once, not
    at every call (``exact_searcher`` says what that costs)."""
    distance = Distance(distance)
    views = _prepare(vectors, distance)

    def ranked(rows: Sequence[int]) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        _check_rows(rows, _num_items(views))
        out = torch.empty((len(rows), _num_items(views)), dtype=torch.float32)
        blocks = _blocks(len(rows), _num_items(views))
        scratch = _scratch(views, blocks)
        for start, stop in blocks:
            _distance_block(views, distance, rows[start:stop], out[start:stop], scratch)
        return out.numpy()

    return ranked


def nearest_in_rows(rows: np.ndarray, queries: Sequence[int], k: int) -> TopK:
    """The ``k`` nearest other items of each of ``queries`` from their whole distance ``rows``
    (``[len(queries), N]``, modified: each query's own entry becomes infinite), nearest first, ties
    in catalog order: a stable argsort's first ``k``.

    Selects each row's ``k`` smallest (``torch.topk``: 256 rows of 100,000 items in 0.02 s, where
    a stable argsort took 1.8 s and ``np.argpartition`` 0.4 s on 2 cores) and orders only those; a
    row whose ``k``-th distance is shared beyond them (duplicate texts) or is NaN is settled by
    ``ranking_rows.stable_head``, so that the result is the stable argsort's in every case.
    """
    k = min(k, rows.shape[1] - 1)
    if k < 1:
        raise ValueError("Ranking needs at least two items.")
    queries = np.asarray(queries, dtype=np.int64)
    rows[np.arange(len(queries)), queries] = np.inf  # never its own neighbour
    nearest = torch.topk(torch.from_numpy(rows), k, dim=1, largest=False, sorted=False).indices.numpy()
    kept = np.take_along_axis(rows, nearest, axis=1)
    order = np.lexsort((nearest, kept), axis=1)
    indices = np.take_along_axis(nearest, order, axis=1)
    # The selected k are the stable argsort's k unless the k-th distance ties beyond them or is NaN.
    ambiguous = np.flatnonzero((rows <= kept.max(axis=1, keepdims=True)).sum(axis=1) != k)
    for row in ambiguous:
        indices[row] = stable_head(rows[row], k)
    return TopK(indices=indices, distances=np.take_along_axis(rows, indices, axis=1))


def top_k(
    vectors: Mapping[str, Matrix],
    distance: Distance | str,
    k: int = 100,
    *,
    queries: Sequence[int] | None = None,
    backend: str = "exact",
    faiss_index: str = "Flat",
    faiss_candidates: int | None = None,
    faiss_parameters: str = "",
) -> TopK:
    """The ``k`` nearest other items of every query item (all items by default).

    Args:
        vectors: one ``[N, H_view]`` matrix per view (dense, or sparse for TF-IDF-like vectors).
        distance: the per-view distance; the views' distances are summed.
        k: list length; capped at ``N - 1`` since an item is never in its own list.
        queries: item indices to rank for; ``None`` ranks every item.
        backend: ``"exact"`` scans every item; ``"faiss"`` asks a FAISS inner-product index on the
            concatenated normalised views for candidates and re-ranks them exactly. The summed
            cosine the index sees orders items exactly as the summed cosine distance does, and as
            the angular distance does for one view; for Metric_Inf over several views (a sum of
            angles) it is a close proxy, hence the re-ranking and the wider candidate list.
        faiss_index: a ``faiss.index_factory`` string, e.g. ``"Flat"`` (exact) or ``"HNSW32"``.
        faiss_candidates: candidates per query for the ``"faiss"`` backend; by default ``k`` when
            the index's order is exact and ``4 * k`` otherwise.
        faiss_parameters: search settings of an approximate index, as ``faiss.ParameterSpace``
            reads them: ``"nprobe=32"`` for IVF (required: FAISS's default, 1 list, misses most
            neighbours, so ``empty_index`` refuses IVF without it), ``"efSearch=256"`` for HNSW;
            an HNSW index given no ``efSearch`` explores as many items as the candidates it
            returns (``search_at_least``), where FAISS's default explores 16.
            Recall and time of each: ``benchmarks/million_items.py``.
    """
    distance = Distance(distance)
    if backend == "exact":
        return exact_searcher(vectors, distance, k)(queries)
    if backend != "faiss":
        raise ValueError(f"Unknown ranking backend {backend!r}; use 'exact' or 'faiss'.")
    views = _checked_views(vectors, distance)
    k = _list_length(k, _num_items(views))
    queries = _query_rows(queries, _num_items(views))
    if len(queries) == 0:
        return _no_lists(k)
    return _faiss_top_k(views, distance, k, queries, faiss_index, faiss_candidates, faiss_parameters)


def exact_searcher(
    vectors: Mapping[str, Matrix], distance: Distance | str, k: int = 100
) -> Callable[[Sequence[int] | None], TopK]:
    """``top_k``'s exact search of ``vectors`` for many calls, each given its query items (all of
    them for ``None``): the views are checked and scaled to unit length once. Listing every
    item's neighbours calls it a chunk of items at a time (``Scorer.nearest_ranker``), with fewer
    items a chunk the larger the catalog, and doing both at every call made a chunk of 33 items
    take 3.06 s at a million items instead of its search's 0.90 s
    (``benchmarks/million_items.py exact-chunks``)."""
    distance = Distance(distance)
    views = _prepare(vectors, distance)
    k = _list_length(k, _num_items(views))

    def search(queries: Sequence[int] | None = None) -> TopK:
        queries = _query_rows(queries, _num_items(views))
        return _exact_top_k(views, distance, k, queries) if len(queries) else _no_lists(k)

    return search


def _list_length(k: int, num_items: int) -> int:
    """``k`` capped at ``num_items - 1``, checked to leave a list to make."""
    if num_items < 2:
        raise ValueError("Ranking needs at least two items.")
    k = min(k, num_items - 1)
    if k < 1:
        raise ValueError(f"k must be at least 1; got {k}.")
    return k


def _query_rows(queries: Sequence[int] | None, num_items: int) -> np.ndarray:
    queries = np.arange(num_items) if queries is None else np.asarray(queries, dtype=np.int64)
    _check_rows(queries, num_items)
    return queries


def _no_lists(k: int) -> TopK:
    return TopK(indices=np.empty((0, k), dtype=np.int64), distances=np.empty((0, k), dtype=np.float32))


def _prepare(vectors: Mapping[str, Matrix], distance: Distance) -> list[torch.Tensor | sparse.csr_matrix]:
    """``_checked_views``, L2-normalised once for cosine-based distances (``_scaled``)."""
    return _scaled(_checked_views(vectors, distance), distance)


def _checked_views(vectors: Mapping[str, Matrix], distance: Distance) -> list[np.ndarray | sparse.spmatrix]:
    """The views as they are (dense ones as float32 arrays), once checked to hold the same items,
    2-D and finite; a sparse view only under a cosine-based distance."""
    if not vectors:
        raise ValueError("No vectors to rank: pass at least one view.")
    sizes = {name: matrix.shape[0] for name, matrix in vectors.items()}
    if len(set(sizes.values())) != 1:
        raise ValueError(f"Every view must hold the same items; rows per view: {sizes}.")
    views = []
    for name, matrix in vectors.items():
        if sparse.issparse(matrix):
            if distance is Distance.EUCLIDEAN:
                raise ValueError(
                    f"View {name!r} is sparse; the euclidean distance is only supported on dense vectors."
                )
            views.append(matrix)
            continue
        # Not made contiguous unless torch needs it (a negative stride): a view may be a column
        # slice of the views side by side (candidate_lists.unit_vectors), which torch reads in
        # place where a copy would cost its size.
        array = np.asarray(matrix, dtype=np.float32)
        array = array if min(array.strides, default=0) >= 0 else np.ascontiguousarray(array)
        if array.ndim != 2:
            raise ValueError(f"View {name!r} must be a 2-D [items, dims] matrix; got shape {array.shape}.")
        # Each row's largest and smallest value carry any NaN (they propagate it) or infinity, and
        # are computed without an [N, H] mask: a second less per million 384-wide vectors, paid on
        # every ranking call.
        tensor = torch.from_numpy(array)
        if not (torch.isfinite(tensor.amax(dim=1)).all() and torch.isfinite(tensor.amin(dim=1)).all()):
            raise ValueError(f"View {name!r} holds NaN or infinite values; check the encoder's output.")
        views.append(array)
    return views


def _scaled(views: list, distance: Distance) -> list[torch.Tensor | sparse.csr_matrix]:
    """Checked views at unit length for cosine-based distances (a view scaled already is kept, not
    copied), dense ones as tensors over the same memory; as they are for the euclidean distance."""
    scaled = []
    for view in views:
        if sparse.issparse(view):
            scaled.append(unit_view(view))
            continue
        tensor = torch.from_numpy(view)
        keep = distance is Distance.EUCLIDEAN or is_unit_scaled(view)
        scaled.append(tensor if keep else F.normalize(tensor, dim=-1, eps=1e-12))
    return scaled


def unit_view(view: Matrix) -> np.ndarray | sparse.csr_matrix:
    """``view``'s rows scaled to unit length, dense as float32, sparse as CSR; a view scaled
    already (``is_unit_scaled``) is returned itself, not copied, so that scaling what
    ``candidate_lists.prepared_parts`` scaled costs no memory and changes no bit."""
    if sparse.issparse(view):
        csr = view.tocsr()
        # Scaled from the CSR that scipy builds with the dtype: its entries' order is the sums'.
        return csr if is_unit_scaled(csr) else normalize_rows(sparse.csr_matrix(view, dtype=np.float32))
    view = np.asarray(view)
    return view if is_unit_scaled(view) else normalize_rows(np.asarray(view, dtype=np.float32))


def is_unit_scaled(matrix: np.ndarray | sparse.csr_matrix) -> bool:
    """Whether ``matrix`` (dense or CSR) is float32 with every row of length 1 to float32 rounding
    (``UNIT_TOLERANCE``) or 0: scaled to unit length already, which scaling again would only copy
    and round. Raw vectors are told by their first row."""
    if matrix.dtype != np.float32:
        return False
    for rows in (matrix[:1], matrix):
        squares = row_norms(rows, squared=True)  # a CSR's without a product matrix of its size
        if not np.all((np.abs(squares - 1) <= UNIT_TOLERANCE) | (squares == 0)):
            return False
    return True


def _num_items(views: list) -> int:
    return views[0].shape[0]


def _check_rows(rows: np.ndarray, num_items: int) -> None:
    if rows.ndim != 1:
        raise ValueError("Query rows must be a 1-D sequence of item indices.")
    if len(rows) and (rows.min() < 0 or rows.max() >= num_items):
        raise ValueError(
            f"Query rows must be item indices in [0, {num_items}); got {rows.min()}..{rows.max()}."
        )


def _blocks(num_rows: int, num_items: int) -> list[tuple[int, int]]:
    size = int(np.clip(BLOCK_BYTES // (4 * max(num_items, 1)), 1, 8192))
    return [(start, min(start + size, num_rows)) for start in range(0, num_rows, size)]


def _scratch(views: list, blocks: list[tuple[int, int]]) -> torch.Tensor | None:
    """A second block buffer, which summing distances over several views needs."""
    if len(views) < 2 or not blocks:
        return None
    return torch.empty((blocks[0][1] - blocks[0][0], _num_items(views)), dtype=torch.float32)


def _sparse_cosine(view: sparse.csr_matrix, rows: np.ndarray) -> torch.Tensor:
    return torch.from_numpy((view[rows] @ view.T).toarray())


def _cosine_into(view: torch.Tensor | sparse.csr_matrix, rows: np.ndarray, out: torch.Tensor) -> torch.Tensor:
    if isinstance(view, torch.Tensor):
        return torch.mm(view[torch.from_numpy(rows)], view.T, out=out)
    return out.copy_(_sparse_cosine(view, rows))


def _distance_block(
    views: list, distance: Distance, rows: np.ndarray, out: torch.Tensor, scratch: torch.Tensor | None
) -> torch.Tensor:
    """Summed distances of ``rows`` to every item, written into ``out`` (``scratch``: a buffer as big)."""
    for position, view in enumerate(views):
        target = out if position == 0 else scratch[: len(rows)]
        if distance is Distance.EUCLIDEAN:
            target.copy_(torch.cdist(view[torch.from_numpy(rows)], view))
        else:
            _cosine_into(view, rows, target)
            step = max(1, SLICE_BYTES // (4 * target.shape[1]))
            for first in range(0, len(rows), step):
                part = target[first : first + step]
                part.copy_(cosine_to_distance(part, distance))
        if position > 0:
            out.add_(target)
    return out


def _orders_by_summed_cosine(distance: Distance, num_views: int) -> bool:
    """Whether ranking by the summed cosine (descending) is the same as by the summed distance."""
    return distance is Distance.COSINE or (distance is Distance.ANGULAR and num_views == 1)


def _summed_cosine_block(views: list, rows: np.ndarray, out: torch.Tensor) -> torch.Tensor:
    """Sum over views of the cosines of ``rows`` with every item, written into ``out``."""
    _cosine_into(views[0], rows, out)
    for view in views[1:]:
        if isinstance(view, torch.Tensor):
            out.addmm_(view[torch.from_numpy(rows)], view.T)
        else:
            out.add_(_sparse_cosine(view, rows))
    return out


def _summed_cosine_to_distance(cosine: torch.Tensor, distance: Distance, num_views: int) -> torch.Tensor:
    if distance is Distance.COSINE:
        return num_views - cosine  # sum_f (1 - cos_f)
    return cosine_to_distance(cosine, distance)  # one view


def _exact_top_k(views: list, distance: Distance, k: int, queries: np.ndarray) -> TopK:
    indices = np.empty((len(queries), k), dtype=np.int64)
    distances = np.empty((len(queries), k), dtype=np.float32)
    blocks = _blocks(len(queries), _num_items(views))
    by_cosine = _orders_by_summed_cosine(distance, len(views))
    # Reused for every block: a fresh 512 MiB block per chunk costs about as much in page faults
    # as the matrix product itself.
    buffer = torch.empty((blocks[0][1] - blocks[0][0], _num_items(views)), dtype=torch.float32)
    scratch = None if by_cosine else _scratch(views, blocks)
    for start, stop in blocks:
        rows = queries[start:stop]
        block = buffer[: len(rows)]
        own = (torch.arange(len(rows)), torch.from_numpy(rows))
        if by_cosine:
            # Top k on the similarity itself; only the k kept are turned into distances.
            _summed_cosine_block(views, rows, block)
            block[own] = float("-inf")  # never an item's own neighbour
            best_cosine, best = torch.topk(block, k, dim=1, largest=True, sorted=True)
            best_distances = _summed_cosine_to_distance(best_cosine, distance, len(views))
        else:
            _distance_block(views, distance, rows, block, scratch)
            block[own] = float("inf")
            best_distances, best = torch.topk(block, k, dim=1, largest=False, sorted=True)
        indices[start:stop] = best.numpy()
        distances[start:stop] = best_distances.numpy()
    return TopK(indices=indices, distances=distances)


def _faiss_top_k(
    views: list,
    distance: Distance,
    k: int,
    queries: np.ndarray,
    factory: str,
    candidates: int | None,
    parameters: str,
) -> TopK:
    """``top_k`` through a FAISS index of the views at unit length side by side, whose inner
    products are sums of per-view cosines. One copy of the scaled vectors is kept, the one the
    index holds or a flat index beside it (``unit_index``): the queries are read from it, and each
    view's cosines for the re-ranking too, where the scaled views, their matrix and a flat index
    per view were held beside the index (6 GiB more at a million items of two 384-wide views;
    docs/scale_out.md). Queries are searched as many at a time as the re-ranking takes
    (``SLICE_BYTES``), not all at once, so no ``[queries, candidates]`` array is held either.

    An item the index returns fewer than ``k`` other items for is ranked exactly (``_exact_top_k``
    on the store's rows), with a warning that counts them. The search raised for it, so that one
    such item stopped the whole search, and a catalog holding many copies of its items (which an
    HNSW graph can link among themselves alone) has some whatever ``efSearch`` or the candidates."""
    if importlib.util.find_spec("faiss") is None:
        raise ImportError(
            "The 'faiss' ranking backend needs faiss-cpu: pip install 'metricbert-trainer[faiss]'."
        )
    if distance is Distance.EUCLIDEAN or any(sparse.issparse(view) for view in views):
        raise ValueError(
            "The 'faiss' backend ranks dense vectors by a cosine-based distance; use backend='exact'."
        )
    exact_order = _orders_by_summed_cosine(distance, len(views))
    candidates = min(candidates or (k if exact_order else 4 * k), _num_items(views) - 1)
    if candidates < k:
        raise ValueError(f"faiss_candidates ({candidates}) must be at least k ({k}).")
    index, store, stored = unit_index(views, factory, parameters)
    search_at_least(index, parameters, candidates + 1)
    view_columns = column_ranges([view.shape[1] for view in views])
    # Each view's unit rows, read in place from the store's columns (what ``_prepare`` gives): the
    # exact ranking of the items the index returns too few for.
    stored_views = [torch.from_numpy(stored[:, columns]) for columns in view_columns]

    shorts = 0
    indices = np.empty((len(queries), k), dtype=np.int64)
    distances = np.empty((len(queries), k), dtype=np.float32)
    step = max(1, SLICE_BYTES // (4 * (candidates + 1)))
    for start in range(0, len(queries), step):
        rows, stop = queries[start : start + step], start + step
        searched = stored[rows]
        scores, found = index.search(searched, candidates + 1)  # +1: the query itself
        labels = np.maximum(found, 0)  # -1: an approximate index ran short; masked below
        if exact_order:  # the index's scores are the summed cosines themselves
            total = _summed_cosine_to_distance(torch.from_numpy(scores), distance, len(views))
        else:
            total = torch.zeros(labels.shape, dtype=torch.float32)
            for columns in view_columns:
                # The other views' columns zeroed: the inner product is this view's cosine.
                one_view = np.zeros_like(searched)
                one_view[:, columns] = searched[:, columns]
                cosine = _candidate_cosines(store, one_view, labels)
                total += cosine_to_distance(torch.from_numpy(cosine), distance)
        total[torch.from_numpy((found < 0) | (found == rows[:, None]))] = float("inf")
        best_distances, best = torch.topk(total, k, dim=1, largest=False, sorted=True)
        indices[start:stop] = np.take_along_axis(labels, best.numpy(), axis=1)
        distances[start:stop] = best_distances.numpy()
        short = np.flatnonzero(torch.isinf(best_distances).any(dim=1).numpy())
        if len(short):
            exact = _exact_top_k(stored_views, distance, k, rows[short])
            indices[start + short], distances[start + short] = exact.indices, exact.distances
            shorts += len(short)
    if shorts:
        logger.warning(
            "The FAISS index %r returned fewer than k=%d neighbours for %d of %d items; they were ranked by "
            "comparing them with every item, which is slower. A wider search reaches more of them (faiss_parameters: "
            "efSearch for HNSW, nprobe for IVF), save the copies of an item that an HNSW graph links among themselves.",
            factory,
            k,
            shorts,
            len(queries),
        )
    return TopK(indices=indices, distances=distances)


def empty_index(width: int, factory: str, parameters: str = ""):
    """A new, empty FAISS inner-product index of ``width`` columns built by ``factory``
    (``faiss.index_factory``) to be searched with ``parameters``; refused (``ValueError``) when it
    is an inverted file (IVF) whose ``parameters`` name no ``nprobe``. Why: FAISS probes one of an
    IVF index's lists unless told more, so IVF1024 compares each query with about a thousandth of
    the catalog and returns lists that miss most of its neighbours, with no error or warning (the
    wine sample's IVF64 found 0.73 of the exact top 100 at ``nprobe=4``, 0.94 at 16:
    docs/scale_out.md). Refused here, before the index is trained or filled."""
    import faiss

    index = faiss.index_factory(width, factory, faiss.METRIC_INNER_PRODUCT)
    inverted = faiss.try_extract_index_ivf(index)
    if inverted is not None and "nprobe" not in parameters:
        raise ValueError(
            f"The FAISS index {factory!r} is an inverted file: FAISS searches 1 of its {inverted.nlist} lists "
            "unless its search parameters name more, and misses most neighbours. Name them "
            "(neighbourhood_search_parameters in training, faiss_parameters in neighbours.top_k), e.g. 'nprobe=16'; "
            "recall at each: docs/scale_out.md."
        )
    return index


def inner_product_index(matrix: np.ndarray, factory: str, parameters: str = ""):
    """A FAISS inner-product index built by ``factory`` (``empty_index``), trained on and filled
    with the rows of ``matrix``, searched with ``parameters`` (``faiss.ParameterSpace``)."""
    return _filled(empty_index(matrix.shape[1], factory, parameters), matrix, parameters)


def _filled(index, matrix: np.ndarray, parameters: str):
    """``index`` trained on (when it needs it) and filled with the rows of ``matrix``, searched
    with ``parameters``."""
    if not index.is_trained:
        index.train(matrix)
    return filled_in_chunks(
        index, len(matrix), lambda start, stop: matrix[start:stop], len(matrix), parameters
    )


def filled_in_chunks(
    index, count: int, rows_between: Callable[[int, int], np.ndarray], chunk_rows: int, parameters: str = ""
):
    """``index`` (trained) filled with ``count`` rows, ``rows_between(start, stop)`` added
    ``chunk_rows`` at a time, then searched with ``parameters`` (``faiss.ParameterSpace``). Rows
    made a chunk at a time spare a whole matrix of them; ``chunk_rows >= count`` adds them in one
    call, which an HNSW graph needs to come out as one call builds it."""
    import faiss

    for start in range(0, count, max(chunk_rows, 1)):
        index.add(rows_between(start, min(start + chunk_rows, count)))
    if parameters:
        faiss.ParameterSpace().set_index_parameters(index, parameters)
    return index


def search_at_least(index, parameters: str, results: int) -> None:
    """Makes an HNSW ``index`` whose ``parameters`` name no ``efSearch`` explore at least the
    ``results`` it is asked for. FAISS's HNSW explores ``efSearch`` items (16 by default) however many
    it returns, the rest filled from their neighbours: asked for 401 candidates (Metric_Inf's top 100)
    at its default, it kept 0.835 of the wine sample's exact top 100, and 0.9995 at 401
    (``benchmarks/million_items.py search``). An ``efSearch`` the caller names is kept, as are other
    indexes' settings."""
    import faiss

    graph = getattr(faiss.downcast_index(index), "hnsw", None)
    if graph is not None and "efSearch" not in parameters:
        graph.efSearch = max(graph.efSearch, results)


def unit_index(views: Sequence[np.ndarray], factory: str, parameters: str = "") -> tuple:
    """``(index, store, rows)``: ``inner_product_index`` of the ``views`` scaled to unit length
    side by side, a flat index holding those rows in item order, and the rows it holds
    (``index_storage_rows``). The store is the index's own storage when it has one (``Flat``,
    ``HNSW``: ``flat_storage``), else a ``faiss.IndexFlatIP`` the index is built from. Either way
    the scaled rows are held once beside the index's own copy at most, where building from a matrix
    of them kept that matrix too. Rows are scaled as ``_scaled`` scales them, so the index is the
    one the scaled views' matrix gave, bit for bit."""
    index = empty_index(sum(view.shape[1] for view in views), factory, parameters)
    stacked = _unit_side_by_side(views)
    store = flat_storage(index)
    if store is not None:
        _filled(index, stacked, parameters)
        return index, store, index_storage_rows(index, store)
    store = inner_product_index(stacked, "Flat")
    rows = index_storage_rows(store, store)  # the matrix goes; the index reads the store
    del stacked
    return _filled(index, rows, parameters), store, rows


def _unit_side_by_side(views: Sequence[np.ndarray]) -> np.ndarray:
    """The views scaled to unit length as ``_scaled`` scales them, side by side in one float32
    matrix, each written into its columns: no scaled view is held apart from the matrix."""
    stacked, slices = stacked_columns(_num_items(views), [view.shape[1] for view in views])
    for view, columns in zip(views, slices, strict=True):
        if is_unit_scaled(view):
            columns[:] = view
        else:
            F.normalize(torch.from_numpy(view), dim=-1, eps=1e-12, out=torch.from_numpy(columns))
    return stacked


def flat_storage(index):
    """The ``faiss.IndexFlat`` that holds ``index``'s vectors in item order (an ``IndexFlat``
    itself, or an HNSW index's storage), or ``None`` (an IVF index's lists, a quantised storage)."""
    import faiss

    storage = faiss.downcast_index(index.storage) if hasattr(index, "storage") else index
    return storage if isinstance(storage, faiss.IndexFlat) else None


def index_storage_rows(index, storage) -> np.ndarray:
    """The float32 ``[ntotal, d]`` rows that ``storage`` (``index``'s flat storage, or ``index``
    itself) holds, as an array over its memory rather than a copy; the array keeps both alive (an
    HNSW index owns its storage, a flat index beside an IVF one owns itself). The memory is
    collapsed into huge pages where Linux allows it (``huge_pages``): the rows are read at random,
    by the re-scoring and by the index's search."""
    rows = np.asarray(_IndexStorage(index, storage))
    collapse_into_huge_pages(rows)
    return rows


class _IndexStorage:
    """What ``np.asarray`` reads a flat FAISS storage's rows through (``index_storage_rows``)."""

    def __init__(self, index, storage) -> None:
        import faiss

        self.owners = (index, storage)
        address = faiss.rev_swig_ptr(storage.get_xb(), 1).__array_interface__["data"][0]
        self.__array_interface__ = {
            "data": (address, False),
            "shape": (storage.ntotal, storage.d),
            "typestr": "<f4",
            "version": 3,
        }


def stacked_columns(count: int, widths: Sequence[int]) -> tuple[np.ndarray, list[np.ndarray]]:
    """An uninitialised float32 ``[count, sum(widths)]`` matrix, and its column slices of ``widths``."""
    stacked = np.empty((count, sum(widths)), dtype=np.float32)
    return stacked, [stacked[:, columns] for columns in column_ranges(widths)]


def column_ranges(widths: Sequence[int]) -> list[slice]:
    """The column ranges of views of ``widths`` side by side in one matrix, left to right."""
    edges = np.cumsum([0, *widths])
    return [slice(start, stop) for start, stop in zip(edges[:-1], edges[1:], strict=True)]


def _candidate_cosines(flat, queries: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Cosines of each query with its candidates (unit vectors), without gathering the vectors.

    ``IndexFlat.compute_distance_subset`` reads the candidates in place; gathering them into a
    ``[queries, candidates, dims]`` tensor first was ten times slower on 2 cores.
    """
    import faiss

    queries, labels = np.ascontiguousarray(queries), np.ascontiguousarray(labels, dtype=np.int64)
    out = np.empty(labels.shape, dtype=np.float32)
    flat.compute_distance_subset(
        len(queries), faiss.swig_ptr(queries), labels.shape[1], faiss.swig_ptr(out), faiss.swig_ptr(labels)
    )
    return out
