"""Shared-neighbour re-ranking: two items are the closer the more near neighbours they share.

A scorer compares two items by their own texts. Items of one kind whose texts share few words
often still have the same near neighbours in the catalog, and items that merely share a rare word
do not: counting shared nearest neighbours (Jarvis and Patrick, 1973; the k-reciprocal
re-ranking of retrieval, Zhong et al., 2017) turns the catalog's structure into a similarity of
its own, with no model and no labels. The recipes' teacher already uses it during training
(``metricbert.shared_neighbours``); here it re-ranks at inference, after any scorer.

Each item's ``k`` nearest other items under the base scorer are listed once for the whole
catalog; the re-ranked distance from a query ``q`` to a candidate ``c`` is

    (1 - g) * z_q(D(q, c)) + g * z_q(-J(q, c)),   J(q, c) = |S_q & S_c| / |S_q | S_c|,

``S_i`` item ``i`` and its ``k`` neighbours, ``z_q`` the standardisation over the query's
candidates of ``evaluation.hybrid``, ``g`` the weight. Listing compares every item with every
other (``N^2`` distances, a chunk of rows at a time: seconds at 10^4 items, hours at 10^6,
benchmarks/million_items.py), so the cost is the catalog's, even for one query. With a
``lists_cache`` the lists are kept in an .npz and read back by the next call on the same catalog
and base ranking (``lists_fingerprint``, ``lists_probe``), so a command that is run again pays
them once. With ``candidates`` each list is searched among the item's nearest under the encoder
(``candidate_lists``): ``N * C`` distances instead of ``N^2``, for catalogs of a million items.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
from scipy import sparse

from metricbert_trainer.data.catalog import Catalog
from metricbert_trainer.data.digests import add_catalog, add_text
from metricbert_trainer.evaluation.candidate_lists import (
    DEFAULT_FAISS_INDEX,
    DEFAULT_FAISS_PARAMETERS,
    PreparedPart,
    candidate_neighbour_lists,
    prepared_parts,
    prepared_ranker,
    search_settings,
)
from metricbert_trainer.evaluation.embedding_cache import (
    check_cache_file,
    npz_names,
    read_fingerprinted_npz,
    write_npz_whole,
)
from metricbert_trainer.evaluation.ranking_rows import fuse_rows
from metricbert_trainer.evaluation.scorers import Scorer

logger = logging.getLogger(__name__)

# The re-ranking of ``evaluate`` and ``recommend``: the neighbours listed per item (0: no re-ranking)
# and the overlap's weight, chosen with the hybrid's TF-IDF weight (``hybrid.DEFAULT_TFIDF_WEIGHT``).
DEFAULT_NEIGHBOURS = 20
DEFAULT_WEIGHT = 0.25
# Rows of the base scorer's distances held at a time while the lists are built ([CHUNK, N] floats).
CHUNK = 512
# Changes whenever the lists' meaning or the cache's layout does, so that older caches are rebuilt.
LISTS_FORMAT = "shared-neighbour-lists-2"
# The base ranking's distances a lists cache keeps to recognise it (``lists_probe``): between
# PROBE_ROWS items and PROBE_COLUMNS items spread over the catalog, equal within PROBE_TOLERANCE
# (float rounding moves a distance by about 1e-6; another model or weight by far more).
PROBE_ROWS = 8
PROBE_COLUMNS = 1024
PROBE_TOLERANCE = 1e-4


def neighbour_lists(
    rank: Callable[[Sequence[int]], np.ndarray],
    count: int,
    neighbours: int,
    chunk: int = CHUNK,
    items: Sequence[int] | None = None,
) -> np.ndarray:
    """``[len(items), neighbours]``: each of ``items``' (default every item's) ``neighbours``
    nearest other items under ``rank`` (a ``Scorer.row_ranker``), nearest first, ties broken by
    catalog order."""
    if not 0 < neighbours < count:
        raise ValueError(f"{neighbours} neighbours per item need a catalog of more items; it has {count}.")
    items = np.arange(count) if items is None else np.asarray(items, dtype=np.int64)
    lists = []
    for start in range(0, len(items), chunk):
        rows = items[start : start + chunk]
        distances = np.array(rank(rows), dtype=np.float32)
        distances[np.arange(len(rows)), rows] = np.inf  # never its own neighbour
        nearest = np.argpartition(distances, neighbours - 1, axis=1)[:, :neighbours]
        order = np.lexsort((nearest, np.take_along_axis(distances, nearest, axis=1)), axis=1)
        lists.append(np.take_along_axis(nearest, order, axis=1))
    return np.concatenate(lists)


def membership(lists: np.ndarray) -> sparse.csr_matrix:
    """``[N, N]`` 0/1: row ``i`` marks item ``i`` and its listed neighbours (the set ``S_i``)."""
    count, size = len(lists), lists.shape[1] + 1
    members = np.concatenate([np.arange(count)[:, None], lists], axis=1)
    return sparse.csr_matrix(
        (np.ones(members.size, dtype=np.float32), (np.repeat(np.arange(count), size), members.ravel())),
        shape=(count, count),
    )


def overlap_rows(
    members: sparse.csr_matrix, rows: Sequence[int], transposed: sparse.csr_matrix | None = None
) -> np.ndarray:
    """``[len(rows), N]`` Jaccard overlaps of the sets of the items ``rows`` with every item's set
    (``membership``; every set has the same size). ``transposed``: ``members.T`` as CSR, for
    callers that ask for many chunks of rows (each call would otherwise transpose all of
    ``members`` again: 0.04 s a call at 100,000 items, against 0.006 s for the product)."""
    size = members[0].sum()
    shared = shared_counts(members, rows, transposed).toarray()
    return shared / (2 * size - shared)


def shared_counts(
    members: sparse.csr_matrix, rows: Sequence[int], transposed: sparse.csr_matrix | None = None
) -> sparse.csr_matrix:
    """``[len(rows), N]`` sparse: how many members the sets of the items ``rows`` share with each
    item's set (``overlap_rows``, which ``transposed`` speeds up)."""
    transposed = members.T.tocsr() if transposed is None else transposed
    return (members[np.asarray(rows, dtype=np.int64)] @ transposed).tocsr()


def reranked_rows(base: np.ndarray, overlaps: np.ndarray, weight: float, rows: Sequence[int]) -> np.ndarray:
    """The formula of this module's docstring: ``base``'s distance rows from ``rows`` and their
    overlaps (``overlap_rows``), each standardised per query, fused at ``weight``."""
    return fuse_rows([(base, 1 - weight), (-overlaps, weight)], rows)


def lists_fingerprint(catalog: Catalog, neighbours: int, search: Sequence[object] = (0,)) -> str:
    """A hex digest of what the lists depend on besides the base ranking (``lists_probe``): the
    catalog's ids and texts, the neighbour count and the ``search`` settings (the candidates they
    were searched among, 0 for every item, and the index that searched them)."""
    digest = hashlib.blake2b(digest_size=20)

    add = partial(add_text, digest)

    add(LISTS_FORMAT)
    add(f"{neighbours} {len(catalog)}")
    add(" ".join(map(str, search)))
    add_catalog(digest, catalog)
    return digest.hexdigest()


def lists_probe(rank: Callable[[Sequence[int]], np.ndarray], count: int) -> np.ndarray:
    """``[PROBE_ROWS, PROBE_COLUMNS]``: the base ranking's distances between items spread over a
    catalog of ``count`` items (0 at an item's distance to itself, the least stable entry and
    unused). Any scorer can be told apart this way, at the cost of one chunk of rows; kept in the
    cache and compared within ``PROBE_TOLERANCE``, not hashed, so that float rounding keeps the
    lists (vectors scaled by another routine moved distances by 6e-6 and changed a hash of them
    rounded to 1e-4; another CPU's order of sums may too) while another model, TF-IDF weight or
    scorer does not."""
    rows = spread(count, PROBE_ROWS)
    columns = spread(count, PROBE_COLUMNS)
    probe = np.array(rank(rows), dtype=np.float64)[:, columns]
    probe[rows[:, None] == columns[None, :]] = 0.0
    return probe


def spread(count: int, size: int) -> np.ndarray:
    """``size`` item rows (at most ``count``) spread evenly over a catalog of ``count`` items."""
    return np.unique(np.linspace(0, count - 1, num=min(size, count)).astype(np.int64))


def is_lists_cache(path: Path) -> bool:
    """Whether ``path`` is an .npz archive of shared-neighbour lists this module wrote (with the
    candidates they were searched among, or, when listed exactly, without; or as written before
    the probe was kept, which is then listed again)."""
    names = npz_names(path)
    return names is not None and set(names) - {"pools", "probe"} == {"fingerprint", "lists"}


def check_lists_cache_path(path: str | Path) -> Path:
    """``path`` as a ``Path``, after a ``UsageError`` when it names a folder or a file that is not
    a lists cache, or cannot be written: a cache never replaces a user's file."""
    return check_cache_file(
        path,
        kind="shared-neighbour lists cache",
        is_cache=is_lists_cache,
        instead="move it, or name another embedding cache",
    )


def lists_cache_beside(embedding_cache: str | Path) -> Path:
    """Where ``evaluate`` and ``recommend`` keep the lists: beside their ``--cache``
    (``items.npz`` -> ``items.shared-neighbours.npz``)."""
    embedding_cache = Path(embedding_cache)
    return embedding_cache.with_name(f"{embedding_cache.stem}.shared-neighbours.npz")


@dataclass
class SearchedLists:
    """Each item's neighbour list (``[N, neighbours]``) and, when the lists were searched among
    candidates, each item's candidates (``[N, candidates]``, int32, the index's nearest first),
    which ``candidate_recommendations`` reuses instead of searching them again; else ``None``."""

    lists: np.ndarray
    pools: np.ndarray | None = None


def read_lists(path: Path, fingerprint: str, probe: np.ndarray, pools: bool = False) -> SearchedLists | None:
    """The lists stored at ``path`` when they were built for ``fingerprint`` under a base ranking
    whose ``probe`` is within ``PROBE_TOLERANCE`` of the stored one, else ``None``; with
    ``pools``, also the candidates they were searched among, when the cache holds them."""
    stored = read_fingerprinted_npz(
        path,
        fingerprint,
        ["lists", "probe"],
        holds="the lists of another catalog, count or search",
        cache="shared-neighbour lists cache",
        again="listing again",
        log=logger,
        optional=["pools"] if pools else [],
    )
    if stored is None:
        return None
    if stored["probe"].shape != probe.shape or not np.allclose(
        stored["probe"], probe, rtol=0, atol=PROBE_TOLERANCE
    ):
        logger.info("%s holds the lists of another base ranking; listing again.", path)
        return None
    return SearchedLists(stored["lists"], stored.get("pools"))


@dataclass
class SharedNeighbourScorer(Scorer):
    """``base`` re-ranked by shared neighbours: each item's ``neighbours`` nearest items under
    ``base`` listed once per catalog, their Jaccard overlap fused with ``base``'s distance at
    ``weight``. A catalog too small for the lists (``neighbours`` >= items - 1, where every set
    would hold every item) is ranked by ``base`` alone, with a warning. ``chunk``: rows of
    ``base``'s distances held at a time while listing. ``lists_cache``: an .npz the lists are
    kept in and read back from (``lists_fingerprint`` and ``lists_probe`` decide whether they
    still apply).
    ``candidates``: list each item's nearest among its ``candidates`` nearest under ``base``'s
    encoder instead of among every item (``candidate_lists``; ``candidate_backend`` and its FAISS
    settings search them), for catalogs too large for ``N^2`` distances; 0 lists exactly."""

    base: Scorer
    neighbours: int
    weight: float
    name: str = ""
    chunk: int = CHUNK
    lists_cache: str | Path | None = None
    candidates: int = 0
    candidate_backend: str = "exact"
    faiss_index: str = DEFAULT_FAISS_INDEX
    faiss_parameters: str = DEFAULT_FAISS_PARAMETERS

    def __post_init__(self) -> None:
        if self.neighbours < 1:
            raise ValueError(f"neighbours must be at least 1; got {self.neighbours}.")
        if self.candidates and self.candidates < self.neighbours:
            raise ValueError(
                f"candidates ({self.candidates}) must be 0 (every item) or at least neighbours "
                f"({self.neighbours})."
            )
        if not 0 < self.weight <= 1:
            raise ValueError(f"The shared neighbours' weight must lie in (0, 1]; got {self.weight}.")
        self.name = self.name or f"{self.base.name} + shared neighbours {self.neighbours}"

    def distance_rows(self, catalog: Catalog, rows: Sequence[int]) -> np.ndarray:
        return self.row_ranker(catalog)(rows)

    def row_ranker(self, catalog: Catalog) -> Callable[[Sequence[int]], np.ndarray]:
        rank, lists = self.base_ranker_and_lists(catalog)
        if lists is None:
            return rank
        members = membership(lists)
        transposed = members.T.tocsr()
        return lambda rows: reranked_rows(
            rank(rows), overlap_rows(members, rows, transposed), self.weight, rows
        )

    def base_ranker_and_lists(
        self, catalog: Catalog
    ) -> tuple[Callable[[Sequence[int]], np.ndarray], np.ndarray | None]:
        """``base``'s row ranker of ``catalog`` and the lists it re-ranks by (``lists``; ``None``
        when the catalog is too small for them, ``reranks``): what ``row_ranker`` fuses, and what a
        kept index (``item_index``) keeps."""
        # Lists searched among candidates read the base's vectors, which its ranker is built from too.
        prepared = prepared_parts(self.base, catalog) if self.searched(catalog) else None
        rank = prepared_ranker(self.base, prepared) if prepared else self.base.row_ranker(catalog)
        if not self.reranks(catalog):
            return rank, None
        return rank, self.lists(rank, catalog, prepared)

    def reranks(self, catalog: Catalog) -> bool:
        """Whether ``catalog`` has items enough for the lists; if not, a warning that ``base``
        alone ranks it (every set would hold every item)."""
        if self.neighbours < len(catalog) - 1:
            return True
        logger.warning(
            "%s: %d items are too few for %d shared neighbours each; ranking by %s alone.",
            self.name, len(catalog), self.neighbours, self.base.name,
        )  # fmt: skip
        return False

    def searched(self, catalog: Catalog) -> int:
        """How many candidates each item's list is searched among: 0 (every item) when
        ``candidates`` is 0 or would hold every other item anyway."""
        return self.candidates if 0 < self.candidates < len(catalog) - 1 else 0

    def search(self, catalog: Catalog) -> tuple[object, ...]:
        """What the lists of ``catalog`` are searched among and by: ``(0,)`` for every item, else
        the candidate count and the backend, with a FAISS backend its index and search parameters."""
        searched = self.searched(catalog)
        if not searched:
            return (0,)
        return (searched, *search_settings(self.candidate_backend, self.faiss_index, self.faiss_parameters))

    def lists(
        self,
        rank: Callable[[Sequence[int]], np.ndarray],
        catalog: Catalog,
        prepared: Sequence[PreparedPart] | None = None,
    ) -> np.ndarray:
        """``neighbour_lists`` under ``rank`` (or searched among candidates, from the base's
        ``prepared`` parts), from ``lists_cache`` when it holds them."""
        return self.searched_lists(rank, catalog, prepared).lists

    def searched_lists(
        self,
        rank: Callable[[Sequence[int]], np.ndarray],
        catalog: Catalog,
        prepared: Sequence[PreparedPart] | None = None,
        pools: bool = False,
    ) -> SearchedLists:
        """``lists``, with ``pools`` also the candidates they were searched among, when they were
        (computed here, or read from a ``lists_cache`` that holds them: a cache keeps them
        whenever the lists were searched among candidates)."""
        cache = fingerprint = probe = None
        if self.lists_cache is not None:
            cache = check_lists_cache_path(self.lists_cache)
            fingerprint = lists_fingerprint(catalog, self.neighbours, self.search(catalog))
            probe = lists_probe(rank, len(catalog))
            cached = read_lists(cache, fingerprint, probe, pools)
            if cached is not None:
                logger.info("%s: reusing the lists of %s.", self.name, cache)
                return cached
        started = time.perf_counter()
        searched = self.searched(catalog)
        among = (
            f"among its {searched} nearest under the encoder"
            if searched
            else "every item against every other"
        )
        logger.info(
            "%s: listing the %d nearest items of each of %d items (%s).",
            self.name, self.neighbours, len(catalog), among,
        )  # fmt: skip
        kept = {}
        if searched:
            # The candidates are kept for a cache or a caller that asks: 4 bytes each, N * C.
            if pools or cache is not None:
                kept["pools"] = np.empty((len(catalog), searched), dtype=np.int32)
            lists = candidate_neighbour_lists(
                self.base,
                catalog,
                self.neighbours,
                searched,
                backend=self.candidate_backend,
                faiss_index=self.faiss_index,
                faiss_parameters=self.faiss_parameters,
                prepared=prepared,
                pools_out=kept.get("pools"),
            )
        else:
            lists = neighbour_lists(rank, len(catalog), self.neighbours, self.chunk)
        logger.info("%s: listed in %.1f s.", self.name, time.perf_counter() - started)
        if cache is not None:
            write_npz_whole(cache, fingerprint=np.array(fingerprint), probe=probe, lists=lists, **kept)
            logger.info("%s: kept the lists in %s.", self.name, cache)
        return SearchedLists(lists, kept.get("pools") if pools else None)
