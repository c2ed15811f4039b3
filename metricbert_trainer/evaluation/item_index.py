"""A catalog's ranking kept in a folder, so that one item's recommendations come in a fraction of a second.

``metricbert recommend --item`` prepares the whole ranking on every call: it imports torch, reads
the catalog, the embedding cache and the other caches, and checks each against the catalog. At a
million items that is half a minute to a minute on 2 CPU cores even when every cache is kept
(docs/scale_out.md), where the answer itself is one row of distances. ``metricbert index`` prepares the ranking once and keeps
what one item's row needs, in ``.npy`` files that NumPy maps instead of reading
(``ItemIndex``):

- each encoder view's vectors at unit length (``encoder-V.npy``, float32 ``[N, H]``), so that an
  item's distances are one product per view;
- each TF-IDF view at unit length twice, by item (the query's own words) and by word (the items
  that share each of them: only those words' postings are read, not the whole matrix);
- each item's shared-neighbour set (itself and its listed neighbours) and, for each item, the sets
  it belongs to, so that a query's overlaps are a count over its own set's members;
- the ids (sorted, for the lookup by id) and display titles as UTF-8 with offsets;
- ``index.json``: the ranking's settings and description, and stamps of the catalog file and the
  model's folder (``data.file_stamps``) taken before the build read them.

An answer reads the item's rows, one pass over each encoder view and the postings of the item's
words, and ranks with the scorers' own row arithmetic (``ranking_rows``): the same neighbours as
``recommend --item`` with the same options, distances to float rounding (tested). This module
imports NumPy alone, so that the lookup's start is NumPy's. An index whose catalog or model no
longer has the stamps it was built from is refused (``ItemIndex.stale``): build it again.
"""

from __future__ import annotations

import bisect
import json
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from metricbert_trainer.data.file_stamps import file_stamp, model_folder_files
from metricbert_trainer.evaluation.ranking_rows import fuse_rows, stable_head

# Changes whenever the folder's layout or meaning does: an index of another format is refused.
INDEX_FORMAT = "metricbert-item-index-1"
META = "index.json"


@dataclass
class IndexedRanking:
    """What an index keeps of a ranking (``indexed_ranking.ranking_parts`` takes it from a scorer).

    ``encoder_views``: each encoder view's vectors at unit length, summed as angular distances
    (``arccos`` of the cosine clamped to ``cosine_clamp``, over pi); ``tfidf_views``: each TF-IDF
    view at unit length (CSR matrices; none without the fusion), summed as cosine distances, the
    two standardised rows fused at ``encoder_weight`` and ``tfidf_weight``; ``lists``: each item's shared neighbours (``[N, k]``; none without
    the re-ranking), their overlaps fused at ``shared_weight``."""

    encoder_views: Sequence[np.ndarray]
    cosine_clamp: float
    tfidf_views: Sequence[object] = ()
    encoder_weight: float = 1.0
    tfidf_weight: float = 0.0
    lists: np.ndarray | None = None
    shared_weight: float = 0.0


@dataclass
class IndexSources:
    """What an index was built from, and how it describes its ranking to a reader: the catalog
    file and the model's folder with their stamps (``file_stamp``, ``folder_stamps``), taken
    before either is read, so that a file that changes while the index is built leaves it stale,
    never stamped as new; the ranking's label, the sentence that says what a printed similarity
    means (none when the ranking prints none) and the command that built it, which a stale index's
    message repeats."""

    catalog: Path
    catalog_stamp: list[int]
    model_folder: Path
    model_files: list[list]
    ranking: str
    similarity: str | None
    command: str
    settings: dict = field(default_factory=dict)


def write_item_index(
    folder: str | Path,
    ranking: IndexedRanking,
    ids: Sequence[str],
    titles: Sequence[str],
    sources: IndexSources,
    *,
    overwrite: bool = False,
) -> Path:
    """Writes the index of ``ranking`` over the items ``ids`` (display ``titles``) to ``folder``:
    into a folder beside it, which replaces ``folder`` once complete, so that an interrupted build
    leaves the earlier index (or none), never half of one. ``overwrite``: replace an existing one
    (an empty folder is replaced without it)."""
    folder = Path(folder)
    if folder.exists() and any(folder.iterdir()) and not overwrite:
        raise FileExistsError(f"{folder} exists; pass --overwrite to replace it.")
    folder.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.", suffix=".partial"))
    try:
        meta = _write_arrays(building, ranking, ids, titles)
        meta.update(
            format=INDEX_FORMAT,
            items=len(ids),
            catalog={"path": str(sources.catalog), "stamp": sources.catalog_stamp},
            model={"path": str(sources.model_folder), "files": sources.model_files},
            ranking=sources.ranking,
            similarity=sources.similarity,
            command=sources.command,
            settings=sources.settings,
        )
        (building / META).write_text(json.dumps(meta, indent=1), encoding="utf-8")
        _replace_folder(building, folder)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return folder


def _write_arrays(folder: Path, ranking: IndexedRanking, ids: Sequence[str], titles: Sequence[str]) -> dict:
    """The index's arrays written into ``folder``; returns what ``index.json`` says of them."""
    count = len(ids)
    for position, view in enumerate(ranking.encoder_views):
        view = np.ascontiguousarray(view, dtype=np.float32)
        if view.shape[0] != count:
            raise ValueError(f"Encoder view {position} holds {view.shape[0]} items; the catalog {count}.")
        np.save(folder / f"encoder-{position}.npy", view)
    for position, view in enumerate(ranking.tfidf_views):
        for name, matrix in (("rows", view.tocsr()), ("columns", view.tocsc())):
            for part in ("data", "indices", "indptr"):
                np.save(folder / f"tfidf-{position}-{name}-{part}.npy", getattr(matrix, part))
    if ranking.lists is not None:
        members = np.concatenate([np.arange(count)[:, None], ranking.lists], axis=1).astype(np.int32)
        np.save(folder / "shared-members.npy", members)
        holders = np.argsort(members.ravel(), kind="stable")  # positions of each item, in set order
        np.save(folder / "shared-holders.npy", (holders // members.shape[1]).astype(np.int32))
        np.save(folder / "shared-holders-indptr.npy", _offsets(np.bincount(members.ravel(), minlength=count)))
    _save_strings(folder, "ids", ids)
    _save_strings(folder, "titles", titles)
    np.save(folder / "ids-sorted.npy", np.array(sorted(range(count), key=ids.__getitem__), dtype=np.int64))
    return {
        "encoder_views": len(ranking.encoder_views),
        "cosine_clamp": ranking.cosine_clamp,
        "tfidf_views": len(ranking.tfidf_views),
        "encoder_weight": ranking.encoder_weight,
        "tfidf_weight": ranking.tfidf_weight,
        "shared_neighbours": 0 if ranking.lists is None else int(ranking.lists.shape[1]),
        "shared_weight": ranking.shared_weight,
    }


def _offsets(lengths: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def _save_strings(folder: Path, name: str, texts: Sequence[str]) -> None:
    encoded = [text.encode("utf-8") for text in texts]
    np.save(folder / f"{name}-bytes.npy", np.frombuffer(b"".join(encoded), dtype=np.uint8))
    np.save(
        folder / f"{name}-offsets.npy", _offsets(np.array([len(part) for part in encoded], dtype=np.int64))
    )


def folder_stamps(folder: str | Path) -> list[list]:
    """The stamps of the files of a model's ``folder`` (``file_stamps.model_folder_files``) as
    ``index.json`` reads them back, lists rather than tuples, so that the two compare equal."""
    return [list(entry) for entry in model_folder_files(Path(folder))]


def _replace_folder(built: Path, folder: Path) -> None:
    """``built`` renamed onto ``folder``; an earlier ``folder`` is moved aside first and removed after."""
    if not folder.exists():
        built.rename(folder)
        return
    earlier = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.", suffix=".earlier"))
    folder.rename(earlier / folder.name)
    built.rename(folder)
    shutil.rmtree(earlier, ignore_errors=True)


class _Strings:
    """The texts of an index's UTF-8 bytes and offsets, decoded one at a time when asked."""

    def __init__(self, folder: Path, name: str) -> None:
        self.data = np.load(folder / f"{name}-bytes.npy", mmap_mode="r")
        self.offsets = np.load(folder / f"{name}-offsets.npy", mmap_mode="r")

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> str:
        return bytes(self.data[self.offsets[index] : self.offsets[index + 1]]).decode("utf-8")


class ItemIndex:
    """An index written by ``write_item_index``: its arrays mapped when first asked for, never read whole."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        meta_path = self.folder / META
        if not meta_path.is_file():
            raise FileNotFoundError(
                f"{self.folder} is not an index (no {META}); build one with metricbert index."
            )
        self.meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if self.meta.get("format") != INDEX_FORMAT:
            raise ValueError(
                f"{self.folder} is an index of format {self.meta.get('format')!r}, not {INDEX_FORMAT!r}; "
                f"build it again: {self.meta.get('command', 'metricbert index ...')}"
            )
        self.ids = _Strings(self.folder, "ids")
        self.titles = _Strings(self.folder, "titles")
        self._mapped: dict[str, np.ndarray] = {}

    def array(self, name: str) -> np.ndarray:
        """The index's array ``name`` (its file's stem), mapped once and kept: a query reads a
        TF-IDF view's arrays once for each of its words."""
        if name not in self._mapped:
            self._mapped[name] = np.load(self.folder / f"{name}.npy", mmap_mode="r")
        return self._mapped[name]

    def stale(self) -> str | None:
        """Why the index no longer answers for its catalog and model (a file changed or gone since
        it was built), or ``None`` when both still have the stamps it recorded."""
        catalog, model = Path(self.meta["catalog"]["path"]), Path(self.meta["model"]["path"])
        if not catalog.is_file():
            return f"its catalog {catalog} is gone"
        if file_stamp(catalog) != self.meta["catalog"]["stamp"]:
            return f"its catalog {catalog} changed since it was built (another size or modification time)"
        if not model.is_dir():
            return f"its model folder {model} is gone"
        if folder_stamps(model) != self.meta["model"]["files"]:
            return f"the files of its model folder {model} changed since it was built"
        return None

    def row_of(self, item_id: str) -> int | None:
        """The catalog row of the item ``item_id``, or ``None``: a binary search over the sorted ids."""
        order = self.array("ids-sorted")
        position = bisect.bisect_left(range(len(order)), item_id, key=lambda at: self.ids[int(order[at])])
        if position < len(order) and self.ids[int(order[position])] == item_id:
            return int(order[position])
        return None

    def nearest(self, item: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` nearest other items of catalog row ``item`` and their distances, nearest first,
        ties in catalog order, as the ranking the index was built from lists them."""
        row = self.distance_row(item)
        k = min(k, len(row) - 1)
        if k < 1:
            raise ValueError("Ranking needs at least two items.")
        row[item] = np.inf  # never its own neighbour
        indices = stable_head(row, k)
        return indices, row[indices]

    def distance_row(self, item: int) -> np.ndarray:
        """The ranking's distances from ``item`` to every item (``[N]`` float32, itself included)."""
        meta, query = self.meta, [item]
        row = self._encoder_row(item)
        if meta["tfidf_views"]:
            parts = [(row[None], meta["encoder_weight"]), (self._tfidf_row(item)[None], meta["tfidf_weight"])]
            row = fuse_rows(parts, query)[0]
        if meta["shared_neighbours"]:
            weight = meta["shared_weight"]
            row = fuse_rows([(row[None], 1 - weight), (-self._overlap_row(item)[None], weight)], query)[0]
        return row

    def _encoder_row(self, item: int) -> np.ndarray:
        clamp = self.meta["cosine_clamp"]
        total = None
        for position in range(self.meta["encoder_views"]):
            # Mapped for this view alone: the pages it touched are let go before the next view's.
            vectors = np.load(self.folder / f"encoder-{position}.npy", mmap_mode="r")
            cosines = vectors @ np.array(vectors[item])
            angles = np.arccos(np.clip(cosines, -clamp, clamp, out=cosines), out=cosines) / np.float32(np.pi)
            total = angles if total is None else total + angles
        return total.astype(np.float32, copy=False)

    def _tfidf_row(self, item: int) -> np.ndarray:
        count, views = self.meta["items"], self.meta["tfidf_views"]
        cosines = np.zeros(count, dtype=np.float64)
        for position in range(views):
            words, weights = self._sparse_row(position, "rows", item)
            columns = [self._sparse_row(position, "columns", word) for word in words]
            if not columns:
                continue
            holders = np.concatenate([items for items, _ in columns])
            shares = np.concatenate(
                [values * weight for (_, values), weight in zip(columns, weights, strict=True)]
            )
            cosines += np.bincount(holders, weights=shares, minlength=count)
        return (views - cosines).astype(np.float32)

    def _sparse_row(self, position: int, name: str, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Row ``index`` of a TF-IDF view kept by item (``rows``) or by word (``columns``): the
        positions it holds and their values."""
        stem = f"tfidf-{position}-{name}"
        indptr = self.array(f"{stem}-indptr")
        start, stop = int(indptr[index]), int(indptr[index + 1])
        return np.asarray(self.array(f"{stem}-indices")[start:stop]), np.asarray(
            self.array(f"{stem}-data")[start:stop]
        )

    def _overlap_row(self, item: int) -> np.ndarray:
        """The Jaccard overlap of ``item``'s shared-neighbour set with every item's (every set has
        the same size), counted over the sets that hold each of its members."""
        members, holders = self.array("shared-members"), self.array("shared-holders")
        indptr = self.array("shared-holders-indptr")
        found = [holders[indptr[member] : indptr[member + 1]] for member in members[item]]
        shared = np.bincount(np.concatenate(found), minlength=self.meta["items"]).astype(np.float32)
        size = np.float32(members.shape[1])
        return shared / (2 * size - shared)
