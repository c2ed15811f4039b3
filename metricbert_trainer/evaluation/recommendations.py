"""Every item's recommendations at once: its ``k`` nearest other items under a scorer, written as
a long table (``id, rank, neighbour_id, distance``), the shape a serving store or a join loads.

``metricbert recommend --item`` answers one item; a catalog's recommendations are usually wanted
for all of its items, computed offline. Asking item by item would prepare the scorer (encoding,
TF-IDF, the shared-neighbour lists) for every call; here it is prepared once
(``Scorer.nearest_ranker``) and walked a chunk of items at a time, each chunk written out before
the next is ranked, so that memory holds one chunk's distance rows, never ``N x N``. Each item's
rows are ``Scorer.nearest``'s for it (ties in catalog order), as ``recommend --item`` lists them,
to float rounding: a model's products of many rows at once round differently from one row's. The
work is every item against every other, ``N^2`` distances: docs/evaluation.md gives measured times.
With ``candidates`` each item's are searched among a pool of candidates instead
(``candidate_recommendations``): ``N * C`` distances, for catalogs of a million items.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from metricbert_trainer.data.catalog import Catalog
from metricbert_trainer.data.output_files import write_whole
from metricbert_trainer.data.text_safety import spreadsheet_safe
from metricbert_trainer.evaluation.candidate_recommendations import candidate_nearest_chunks
from metricbert_trainer.evaluation.neighbours import TopK
from metricbert_trainer.evaluation.scorers import Scorer

logger = logging.getLogger(__name__)

COLUMNS = ("id", "rank", "neighbour_id", "distance")
FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".parquet": "parquet"}
# Bytes of float64 distance rows one chunk may hold: 33 rows of a million items, every row of a
# catalog of up to 5,792 items; at most MAX_CHUNK items, at least one.
CHUNK_BYTES = 2**28
MAX_CHUNK = 8192
# Rows of a Parquet row group (pyarrow's own largest): chunks are gathered up to it. A group per
# chunk made 782 of them at 100,000 items: 13.5 MiB read back in 0.08 s, against 10.4 MiB and
# 0.03 s in one group (docs/evaluation.md).
ROW_GROUP_ROWS = 2**20


def recommendation_format(path: str | Path) -> str:
    """The table format ``path``'s suffix names; ``ValueError`` for any other suffix."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(
            f"{path}: unsupported recommendations format {suffix!r}; use one of {sorted(FORMATS)}."
        )
    return FORMATS[suffix]


def shard_items(count: int, num_shards: int, index: int) -> np.ndarray:
    """The items of shard ``index`` of ``num_shards``: a contiguous range of the ``count`` items,
    the first ``count % num_shards`` shards one item longer (as ``datasets.Dataset.shard`` with
    ``contiguous=True``), so the shards' tables, concatenated in index order, are the whole one."""
    if not 0 <= index < num_shards:
        raise ValueError(f"Need 0 <= shard index ({index}) < number of shards ({num_shards}).")
    if num_shards > count:
        raise ValueError(f"{num_shards} shards of {count} items would leave some empty; use at most {count}.")
    size, longer = divmod(count, num_shards)
    start = index * size + min(index, longer)
    return np.arange(start, start + size + (index < longer))


def chunk_size(items: int) -> int:
    """How many items one chunk ranks in a catalog of ``items``: ``CHUNK_BYTES`` of distance rows."""
    return int(np.clip(CHUNK_BYTES // (8 * max(items, 1)), 1, MAX_CHUNK))


def recommendation_chunks(
    scorer: Scorer,
    catalog: Catalog,
    k: int,
    *,
    chunk: int | None = None,
    candidates: int = 0,
    items: np.ndarray | None = None,
    show_progress: bool = False,
) -> Iterator[pd.DataFrame]:
    """Every item's ``k`` nearest other items under ``scorer``, a table of ``COLUMNS`` per chunk of
    ``chunk`` items (``chunk_size`` by default), in catalog order, nearest first (rank 1).
    ``candidates``: search each item's among its pool of candidates instead
    (``candidate_recommendations``, its own chunks); 0, or as many as every other item, compares
    every pair. ``items``: only these items' rows (a shard, ``shard_items``), ranked against the
    whole catalog as the whole table ranks them."""
    items = np.arange(len(catalog)) if items is None else np.asarray(items)
    ids = np.asarray(catalog.ids, dtype=object)
    with tqdm(total=len(items), desc="Recommending", unit="item", disable=not show_progress) as progress:
        for queries, found in nearest_chunks(scorer, catalog, k, chunk, candidates, items):
            listed = found.indices.shape[1]
            yield pd.DataFrame(
                {
                    "id": np.repeat(ids[queries], listed),
                    "rank": np.tile(np.arange(1, listed + 1), len(queries)),
                    "neighbour_id": ids[found.indices.ravel()],
                    "distance": found.distances.ravel(),
                }
            )
            progress.update(len(queries))


def nearest_chunks(
    scorer: Scorer, catalog: Catalog, k: int, chunk: int | None, candidates: int, items: np.ndarray
) -> Iterator[tuple[np.ndarray, TopK]]:
    """``(queries, TopK)`` chunk after chunk of ``items`` for ``recommendation_chunks``."""
    count = len(catalog)
    if 0 < candidates < count - 1:
        yield from candidate_nearest_chunks(scorer, catalog, k, candidates, items=items)
        return
    chunk = chunk or chunk_size(count)
    nearest = scorer.nearest_ranker(catalog, k)
    for start in range(0, len(items), chunk):
        queries = items[start : start + chunk]
        yield queries, nearest(queries)


def write_recommendations(
    scorer: Scorer,
    catalog: Catalog,
    k: int,
    path: str | Path,
    *,
    chunk: int | None = None,
    candidates: int = 0,
    items: np.ndarray | None = None,
    show_progress: bool = False,
) -> int:
    """Writes ``recommendation_chunks`` (of ``items``, every item by default) to ``path`` (CSV,
    TSV, JSONL or Parquet, by its suffix) and returns the rows written. The table is written beside
    ``path`` and renamed when complete, so an interrupted or failed run leaves no partial file
    behind."""
    path = Path(path)
    kind = recommendation_format(path)
    started = time.perf_counter()
    written = 0

    def write(temporary: Path) -> None:
        nonlocal written
        with _TableWriter(temporary, kind) as writer:
            for table in recommendation_chunks(
                scorer,
                catalog,
                k,
                chunk=chunk,
                candidates=candidates,
                items=items,
                show_progress=show_progress,
            ):
                writer.write(table)
                written += len(table)

    write_whole(path, write)
    logger.info(
        "Wrote %d recommendations (%d items) to %s in %.1f s.",
        written,
        len(catalog) if items is None else len(items),
        path,
        time.perf_counter() - started,
    )
    return written


def join_tables(parts: Sequence[Path], path: str | Path) -> Path:
    """Writes the tables ``parts`` (each written by ``write_recommendations`` in ``path``'s format)
    one after the other into ``path``, whole (``write_whole``): the table one call over all their
    items in that order writes, row for row (a Parquet file's row groups end where a part ends).
    CSV and TSV keep the first part's header alone; the files are copied, not parsed."""
    kind = recommendation_format(path)

    def write(temporary: Path) -> None:
        temporary.unlink()  # created private by write_whole: made anew, with the mode a part has
        if kind == "parquet":
            _join_parquet(parts, temporary)
            return
        with temporary.open("xb") as joined:
            for number, part in enumerate(parts):
                with Path(part).open("rb") as source:
                    if number and kind in ("csv", "tsv"):
                        source.readline()  # the header: the column names, which hold no line break
                    shutil.copyfileobj(source, joined)

    return write_whole(path, write)


def _join_parquet(parts: Sequence[Path], path: Path) -> None:
    """The row groups of the Parquet ``parts`` in order into one file, a group at a time."""
    import pyarrow.parquet as pq

    writer = None
    try:
        for part in parts:
            source = pq.ParquetFile(part)
            writer = writer or pq.ParquetWriter(path, source.schema_arrow)
            for group in range(source.num_row_groups):
                writer.write_table(source.read_row_group(group), row_group_size=ROW_GROUP_ROWS)
    finally:
        if writer is not None:
            writer.close()


class _TableWriter:
    """Appends tables of the same columns to one file of ``kind``: text formats chunk after chunk,
    Parquet in row groups of ``ROW_GROUP_ROWS`` (chunks held until they fill one)."""

    def __init__(self, path: Path, kind: str) -> None:
        self.path, self.kind = path, kind
        self._parquet = None
        self._pending: list = []
        self._started = False

    def __enter__(self) -> _TableWriter:
        self.path.unlink(missing_ok=True)  # the empty file that names it: chunks are appended
        return self

    def write(self, table: pd.DataFrame) -> None:
        if self.kind == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            arrow = pa.Table.from_pandas(table, preserve_index=False)
            if self._parquet is None:
                self._parquet = pq.ParquetWriter(self.path, arrow.schema)
            self._pending.append(arrow)
            if sum(len(pending) for pending in self._pending) >= ROW_GROUP_ROWS:
                self._write_pending()
        elif self.kind == "jsonl":
            with self.path.open("a", encoding="utf-8") as handle:
                table.to_json(handle, orient="records", lines=True, force_ascii=False)
        else:
            separator = "\t" if self.kind == "tsv" else ","
            ids = {column: table[column].map(spreadsheet_safe) for column in ("id", "neighbour_id")}
            table = table.assign(**ids)
            table.to_csv(self.path, sep=separator, index=False, header=not self._started, mode="a")
        self._started = True

    def _write_pending(self) -> None:
        import pyarrow as pa

        self._parquet.write_table(pa.concat_tables(self._pending), row_group_size=ROW_GROUP_ROWS)
        self._pending = []

    def __exit__(self, failed, *exc) -> None:
        if self._parquet is not None:
            if self._pending and failed is None:  # a failed run's file is removed anyway
                self._write_pending()
            self._parquet.close()
