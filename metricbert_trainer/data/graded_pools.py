"""Reading expert judgments given as graded candidate pools and tying them to a catalog.

A pool judges one query item (optionally one facet of it: a paper's background, method or result)
against a set of candidates, each graded (0 = not similar, higher = more similar). Unlike the
seed -> similar-items annotations of ``data.annotations``, which rank the whole catalog, a pool
is ranked on its own: the candidates are usually all on the query's topic, so what is measured
is the order *inside* a topical neighbourhood, the fine similarity an expert judges
(``evaluation.pool_metrics``).

Two formats, both read as data:

* JSON lines, one pool a line: ``query_id``, ``candidates`` (item ids), ``relevance`` (their
  grades, same order) and optionally ``facet`` (the CSFCube development fold of ``data/csfcube``);
* TREC qrels, the format of trec_eval, BEIR and ir_measures: one judgment a line,
  ``QUERY_ID ITERATION ITEM_ID GRADE`` separated by white space. The pool of a query is every
  item judged for it. A query id names a catalog item; ``ITEM_ID#FACET`` names a facet of it.

Items are matched by id alone: pools come from a collection whose ids the catalog keeps. An id
matching no catalog item is an error listing it (``on_unmatched="warn"`` drops it instead).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from metricbert_trainer.data.annotations import (
    ON_UNMATCHED,
    POOL_SUFFIXES,
    AnnotationError,
    unmatched_listing,
)
from metricbert_trainer.data.catalog import Catalog, not_utf8_message
from metricbert_trainer.data.input_files import input_file_problem

logger = logging.getLogger(__name__)

FACET_SEPARATOR = "#"


@dataclass(frozen=True)
class GradedPool:
    """One query item (catalog index), the facet judged ("" when none), its candidates (catalog
    indices, file order) and their grades."""

    query: int
    facet: str
    candidates: np.ndarray
    grades: np.ndarray
    where: str


@dataclass(frozen=True)
class GradedPools:
    """Every pool of a judgment file, in file order."""

    pools: tuple[GradedPool, ...]
    source: str

    @property
    def queries(self) -> list[int]:
        """The query items, each once, in the order first met (a query may have several facets)."""
        return list(dict.fromkeys(pool.query for pool in self.pools))

    @property
    def facets(self) -> list[str]:
        """The facets judged, each once, in the order first met ("" for pools without one)."""
        return list(dict.fromkeys(pool.facet for pool in self.pools))

    @property
    def num_judgments(self) -> int:
        return sum(len(pool.candidates) for pool in self.pools)


def is_pool_file(path: str | Path) -> bool:
    """Whether ``path`` names judgments as graded pools (``.jsonl`` or ``.qrels``), which
    ``load_graded_pools`` reads, rather than seed -> similar annotations."""
    return Path(path).suffix.lower() in POOL_SUFFIXES


def load_graded_pools(path: str | Path, catalog: Catalog, *, on_unmatched: str = "error") -> GradedPools:
    """Reads graded pools (JSON lines or TREC qrels, by suffix) and ties them to ``catalog``."""
    if on_unmatched not in ON_UNMATCHED:
        raise ValueError(f"on_unmatched must be one of {ON_UNMATCHED}; got {on_unmatched!r}.")
    path = Path(path)
    problem = input_file_problem(path, "judgments")
    if problem:
        raise AnnotationError(f"{problem[0].upper()}{problem[1:]}.")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise AnnotationError(not_utf8_message(path, error)) from error
    read = _read_qrels if path.suffix.lower() == ".qrels" else _read_jsonl
    return _match(read(path, lines), catalog, source=str(path), on_unmatched=on_unmatched)


@dataclass(frozen=True)
class _PoolText:
    """A pool as the file names it: ids, not yet catalog indices."""

    query: str
    facet: str
    candidates: list[str]
    grades: list[int]
    where: str


def _read_jsonl(path: Path, lines: list[str]) -> list[_PoolText]:
    pools = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"line {number}"
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError) as error:
            raise AnnotationError(f"{path}, {where}: not valid JSON ({error}).") from error
        if not isinstance(entry, dict) or not {"query_id", "candidates", "relevance"} <= set(entry):
            raise AnnotationError(
                f"{path}, {where}: expected an object with query_id, candidates and relevance "
                "(and optionally facet)."
            )
        candidates, grades = entry["candidates"], entry["relevance"]
        if not isinstance(candidates, list) or not isinstance(grades, list) or len(candidates) != len(grades):
            raise AnnotationError(
                f"{path}, {where}: candidates and relevance must be lists of the same length; "
                f"got {len(candidates) if isinstance(candidates, list) else candidates!r} candidates and "
                f"{len(grades) if isinstance(grades, list) else grades!r} grades."
            )
        pools.append(
            _PoolText(
                query=str(entry["query_id"]),
                facet=str(entry.get("facet") or ""),
                candidates=[str(item) for item in candidates],
                grades=[_grade(path, where, grade) for grade in grades],
                where=where,
            )
        )
    return pools


def _read_qrels(path: Path, lines: list[str]) -> list[_PoolText]:
    pools: dict[str, _PoolText] = {}
    for number, line in enumerate(lines, start=1):
        fields = line.split()
        if not fields:
            continue
        where = f"line {number}"
        if len(fields) != 4:
            raise AnnotationError(
                f"{path}, {where}: a qrels line has 4 fields (QUERY_ID ITERATION ITEM_ID GRADE); "
                f"got {len(fields)}."
            )
        query, _, item, grade = fields
        if query not in pools:
            item_of_query, _, facet = query.partition(FACET_SEPARATOR)
            pools[query] = _PoolText(item_of_query, facet, [], [], where)
        pools[query].candidates.append(item)
        pools[query].grades.append(_grade(path, where, grade))
    return list(pools.values())


def _grade(path: Path, where: str, value) -> int:
    try:
        grade = int(value)
    except (TypeError, ValueError):
        grade = None
    if grade is None or grade < 0 or (isinstance(value, float) and value != grade):
        raise AnnotationError(f"{path}, {where}: a grade is a whole number >= 0; got {value!r}.")
    return grade


def _match(texts: Iterable[_PoolText], catalog: Catalog, *, source: str, on_unmatched: str) -> GradedPools:
    """Catalog indices for the pools' ids; unmatched ids raise or are dropped (``on_unmatched``)."""
    position = {item_id: index for index, item_id in enumerate(catalog.ids)}
    unmatched: dict[str, str] = {}
    pools = []
    for text in texts:
        if text.query not in position:
            unmatched.setdefault(text.query, text.where)
            continue
        query = position[text.query]
        kept = {}  # candidate index -> grade: file order, the query itself and repeats left out
        for item, grade in zip(text.candidates, text.grades, strict=True):
            if item not in position:
                unmatched.setdefault(item, text.where)
            elif position[item] != query:
                kept.setdefault(position[item], grade)
        if kept:
            pools.append(
                GradedPool(
                    query=query,
                    facet=text.facet,
                    candidates=np.fromiter(kept, dtype=np.int64, count=len(kept)),
                    grades=np.fromiter(kept.values(), dtype=np.int64, count=len(kept)),
                    where=f"{source}, {text.where}",
                )
            )
    if unmatched:
        listing = unmatched_listing({repr(item): where for item, where in unmatched.items()})
        if on_unmatched == "error":
            raise AnnotationError(
                f"{source}: {len(unmatched)} ids match no item of the catalog {catalog.source}: {listing}. "
                "Check that --id-column names the ids the judgments use, or pass --on-unmatched warn "
                "to drop them."
            )
        logger.warning("%s: dropped %d ids that match no catalog item: %s.", source, len(unmatched), listing)
    if not pools:
        raise AnnotationError(f"{source}: no pool can be used with the catalog {catalog.source}.")
    return GradedPools(pools=tuple(pools), source=source)
