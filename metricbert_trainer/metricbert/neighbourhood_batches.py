"""Batches built of neighbourhoods, so that in-batch negatives and the teacher's ranking are informative.

A batch of 32 items drawn at random from a catalog of thousands rarely holds two similar items:
the hardest in-batch negative is then an easy one, and the hybrid teacher's ranking of the batch
(``losses.teacher``) orders items that are all far apart. Topic-aware sampling (Hofstaetter et
al., TAS-Balanced, SIGIR 2021) composes each batch from a cluster instead, which makes in-batch
negatives hard without mining the whole corpus. Here a batch is a few *neighbourhoods*: groups
of ``neighbourhood_size`` items that the frozen starting model places close together (its
vectors of both fields, as ``Metric_Inf`` compares items), so a batch of 32 with groups of 8
holds four small topics, each item with near neighbours and far ones beside it. The
false-negative filter stays in charge of neighbours that are truly the same item.

The groups are drawn anew every epoch from the run's seed: a random order of the items, and each
item not yet taken opens a group with its nearest neighbours not yet taken (from a list of
``candidates`` per item, computed once); the groups are then shuffled and laid end to end.
Computing the lists exactly compares every item with every other, in chunks: ``N^2 x hidden``
work (seconds at 10^4 items on a CPU, hours at 10^6). An approximate FAISS index
(``neighbourhood_index``, e.g. ``"IVF1024,Flat"``) lists them in minutes at 10^6; a group only
needs near items, not the exact nearest (docs/scale_out.md measures both).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import Sampler

from metricbert_trainer.evaluation.candidate_lists import take_rows_into
from metricbert_trainer.evaluation.neighbours import empty_index, filled_in_chunks, stacked_columns

# Items compared with the whole catalog at a time while the neighbour lists are built.
CHUNK = 1024
# ``neighbourhood_index`` value that compares every item with every other.
EXACT = "exact"
# Items whose vectors an approximate index is asked about at a time (192 MiB of two MiniLM fields).
QUERY_ROWS = 65536


def candidates_per_item(neighbourhood_size: int) -> int:
    """How long each item's neighbour list is: enough candidates that a group rarely has to be
    topped up with items from outside them (the trainer and the scale benchmark share it)."""
    return 4 * neighbourhood_size


def item_vectors(fields: Sequence[torch.Tensor], rows: Sequence[np.ndarray] | None = None) -> torch.Tensor:
    """One unit vector per item from each field's vectors, ``fields[f][rows[f]]`` (``fields[f]``
    itself without ``rows``; ``[N, H]`` each): the cosine of two items' vectors is the mean of their
    fields' cosines, the similarities ``Metric_Inf`` sums. Each field's rows are gathered into its
    columns of the one ``[N, F x H]`` matrix and scaled there, so no field is held apart from it:
    the trainer gathers them from the guide's cache (one row per distinct text, float32 or
    float16, cast as gathered), where copies of the two fields were 29 GiB at ten million items."""
    rows = [np.arange(len(vectors)) for vectors in fields] if rows is None else rows
    items, slices = stacked_columns(len(rows[0]), [vectors.shape[1] for vectors in fields])
    for vectors, picked, columns in zip(fields, rows, slices, strict=True):
        take_rows_into(vectors.numpy(), picked, columns)
        unit = torch.from_numpy(columns)
        torch.nn.functional.normalize(unit, dim=1, out=unit)
    return torch.from_numpy(items).div_(len(fields) ** 0.5)


def nearest_neighbours(
    vectors: torch.Tensor,
    candidates: int,
    index: str = EXACT,
    search_parameters: str = "",
    rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """[len(rows), K]: each of the items ``rows`` (every item by default), its ``candidates`` most
    similar other items of the catalog (unit ``vectors``), nearest first.

    ``index``: ``"exact"``, or a ``faiss.index_factory`` string whose inner-product index lists
    them approximately, searched with ``search_parameters`` (``"nprobe=16"`` for IVF).
    """
    rows = torch.arange(len(vectors)) if rows is None else rows
    if index != EXACT:
        return indexed_neighbours(vectors, candidates, index, search_parameters, rows)
    kept = min(candidates, len(vectors) - 1)
    lists = []
    for chunk in rows.split(CHUNK):
        similarity = vectors[chunk] @ vectors.T
        similarity[torch.arange(len(chunk)), chunk] = -torch.inf  # never one's own neighbour
        lists.append(similarity.topk(kept, dim=1).indices)
    return torch.cat(lists)


def check_faiss_index(factory: str, search_parameters: str) -> None:
    """Raises ``ValueError`` before any model loads when FAISS is missing or cannot build
    ``factory`` or set ``search_parameters`` on it, or when they would search a small part of the
    catalog (``empty_index``: an IVF index with no ``nprobe``)."""
    try:
        import faiss
    except ImportError as error:
        raise ValueError(
            f"neighbourhood_index {factory!r} needs faiss-cpu: pip install 'metricbert-trainer[faiss]'."
        ) from error
    try:
        index = empty_index(8, factory, search_parameters)
        if search_parameters:
            faiss.ParameterSpace().set_index_parameters(index, search_parameters)
    except RuntimeError as error:
        reason = re.sub(r"^Error in .* at \S+:\d+: ", "", str(error).strip().splitlines()[-1])
        raise ValueError(
            f"neighbourhood_index {factory!r} with search parameters {search_parameters!r}: FAISS says {reason}"
        ) from error


def indexed_neighbours(
    vectors: torch.Tensor, candidates: int, factory: str, search_parameters: str, rows: torch.Tensor
) -> torch.Tensor:
    """``nearest_neighbours`` of ``rows`` through an approximate FAISS index, trained and filled
    with every item (``indexed_lists``); an HNSW index given no ``efSearch`` explores as many items
    as it returns (``search_at_least``)."""
    from metricbert_trainer.evaluation.neighbours import inner_product_index, search_at_least

    matrix = np.ascontiguousarray(vectors.float().numpy())
    index = inner_product_index(matrix, factory, search_parameters)
    search_at_least(index, search_parameters, min(candidates, len(matrix) - 1) + 1)
    return indexed_lists(index, lambda picked: matrix[picked], len(matrix), candidates, rows)


def neighbours_of_fields(
    fields: Sequence[torch.Tensor],
    field_rows: Sequence[np.ndarray],
    candidates: int,
    index: str = EXACT,
    search_parameters: str = "",
    rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """``nearest_neighbours(item_vectors(fields, field_rows), ...)``, the same lists, holding less
    at once when ``index`` is one that must be trained (IVF): the item matrix is let go once the
    index is trained on it, and the items are then added, and every index is asked about them,
    ``QUERY_ROWS`` items at a time, gathered from ``fields`` (the guide's cache in a run). Why:
    the cache, the item matrix and the index's copy of it were three copies of the start's vectors
    at once, 29 GiB each at ten million MiniLM items. An index that needs no training (``Flat``, a
    graph such as HNSW, whose links depend on how its items are added) is filled from the matrix
    in one call, as ``nearest_neighbours`` fills it."""
    if index == EXACT:
        return nearest_neighbours(item_vectors(fields, field_rows), candidates, rows=rows)
    matrix = item_vectors(fields, field_rows).numpy()
    count = len(matrix)
    built = empty_index(matrix.shape[1], index, search_parameters)
    if built.is_trained:
        return nearest_neighbours(torch.from_numpy(matrix), candidates, index, search_parameters, rows)
    built.train(matrix)
    del matrix  # from here on the index holds the only copy

    def gathered(picked: np.ndarray) -> np.ndarray:
        return item_vectors(fields, [chosen[picked] for chosen in field_rows]).numpy()

    filled_in_chunks(
        built, count, lambda start, stop: gathered(np.arange(start, stop)), QUERY_ROWS, search_parameters
    )
    return indexed_lists(built, gathered, count, candidates, rows)


def indexed_lists(
    index,
    gathered: Callable[[np.ndarray], np.ndarray],
    count: int,
    candidates: int,
    rows: torch.Tensor | None,
) -> torch.Tensor:
    """Each of the items ``rows`` (every one of ``count`` by default), its ``candidates`` nearest
    other items by a filled FAISS ``index``, asked for one more neighbour than needed, since an item
    usually finds itself. A slot the index leaves empty (``-1``) holds the item itself, which a group
    skips as already taken. The queries are ``gathered`` (their item vectors) and searched
    ``QUERY_ROWS`` items at a time: gathered at once they were a copy of every item's vector."""
    kept = min(candidates, count - 1)
    queries = np.arange(count) if rows is None else rows.numpy()
    lists = np.empty((len(queries), kept), dtype=np.int64)
    for start in range(0, len(queries), QUERY_ROWS):
        items = queries[start : start + QUERY_ROWS, None]
        _, found = index.search(gathered(items[:, 0]), kept + 1)
        found = np.where(found < 0, items, found)
        # Drop each item from its own list; where the index did not return it, drop the farthest.
        own = found == items
        own[~own.any(axis=1), -1] = True
        lists[start : start + len(items)] = found[~own].reshape(len(items), kept)
    return torch.from_numpy(lists)


def neighbourhood_groups(
    neighbours: torch.Tensor, neighbourhood_size: int, generator: torch.Generator
) -> list[list[int]]:
    """The catalog's items split into groups of up to ``neighbourhood_size`` near neighbours.

    Items are visited in a random order; one not yet taken opens a group and takes its nearest
    neighbours not yet taken. A group that finds too few in its list is topped up by the next
    items of the order that are still free, so every group but the last has the full size.
    """
    order = torch.randperm(len(neighbours), generator=generator).tolist()
    taken = [False] * len(neighbours)
    groups, spare = [], iter(order)
    for item in order:
        if taken[item]:
            continue
        group = [item]
        taken[item] = True
        for neighbour in neighbours[item].tolist():
            if len(group) == neighbourhood_size:
                break
            if not taken[neighbour]:
                group.append(neighbour)
                taken[neighbour] = True
        for other in spare:
            if len(group) == neighbourhood_size:
                break
            if not taken[other]:
                group.append(other)
                taken[other] = True
        groups.append(group)
    return groups


class NeighbourhoodSampler(Sampler[int]):
    """Every item once per epoch, in runs of near neighbours (``neighbourhood_groups``) in a
    shuffled order; consecutive runs make up each batch, whole when the size divides the batch's.
    ``set_epoch`` (called by the Trainer's loop) makes the order a function of the seed and the
    epoch, so a resumed run draws the same."""

    def __init__(self, neighbours: torch.Tensor, neighbourhood_size: int, seed: int) -> None:
        self.neighbours = neighbours
        self.neighbourhood_size = neighbourhood_size
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.neighbours)

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        groups = neighbourhood_groups(self.neighbours, self.neighbourhood_size, generator)
        positions = torch.randperm(len(groups), generator=generator).tolist()
        # The short group, if any, goes last: before it, every batch holds whole groups.
        positions.sort(key=lambda position: len(groups[position]) < self.neighbourhood_size)
        for position in positions:
            yield from groups[position]
