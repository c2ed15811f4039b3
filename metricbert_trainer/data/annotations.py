"""Reading annotated similar items (seed -> items similar to it) and tying them to a catalog.

Three formats, all read as data (never pickle):

* the sommelier CSV of the RecoBERT Zenodo record ("1027 expert annotations for 100 wines
  seeds.csv"): columns such as ``seed url``, ``seed title``, ``recommended url``,
  ``recommended title``, the seed's cells filled only on its first row;
* the proxy CSV of ``data/wines``: ``seed_id``, ``seed_title``, ``recommended_id``,
  ``recommended_title``;
* the video-games JSON ``{seed_title: {similar_title: 1, ...}}``.

Both CSV layouts are one format once column names are normalised (case, ``_`` vs space) and a
seed's cells are carried down to the rows after it. An annotation is matched to a catalog item by
id (an ``id`` or ``url`` column) when the catalog has it, else by title with whitespace collapsed
and HTML entities both kept and unescaped (annotation files and catalogs disagree on ``&amp;``).
Annotations that match nothing are an error listing them, because evaluating on the wrong
catalog fails silently otherwise; ``on_unmatched="warn"`` drops them with a count instead.
"""

from __future__ import annotations

import html
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from metricbert_trainer.data.catalog import Catalog, not_utf8_message, read_csv_strings
from metricbert_trainer.data.input_files import input_file_problem
from metricbert_trainer.errors import UsageError

logger = logging.getLogger(__name__)

ON_UNMATCHED = ("error", "warn")
# The suffixes of expert judgments given as graded pools (``data.graded_pools``), not seed -> similar items.
POOL_SUFFIXES = (".jsonl", ".qrels")
# Normalised CSV column name -> (whose, what). An id column wins over a url column.
_CSV_COLUMNS = {
    "seed id": ("seed", "id"),
    "seed url": ("seed", "url"),
    "seed title": ("seed", "title"),
    "recommended id": ("recommended", "id"),
    "recommended url": ("recommended", "url"),
    "recommended title": ("recommended", "title"),
}
_LISTED_UNMATCHED = 20


class AnnotationError(UsageError):
    """Annotations that cannot be used as they are; the message says where and what to do."""


@dataclass(frozen=True)
class Annotations:
    """Seed item index -> indices of the items annotated as similar to it (indices into the catalog)."""

    similar: dict[int, tuple[int, ...]]
    source: str

    @property
    def seeds(self) -> list[int]:
        return list(self.similar)

    @property
    def num_pairs(self) -> int:
        return sum(len(items) for items in self.similar.values())


@dataclass(frozen=True)
class ItemReference:
    """How an annotation file names an item: its id and/or title, and where (for messages)."""

    id: str | None
    title: str | None
    where: str

    def describe(self) -> str:
        if self.title is not None:
            return f"title {self.title!r}" if self.id is None else f"title {self.title!r} (id {self.id!r})"
        return f"id {self.id!r}"


def load_annotations(path: str | Path, catalog: Catalog, *, on_unmatched: str = "error") -> Annotations:
    """Reads a sommelier/proxy CSV or a video-games JSON file and matches it to ``catalog``.

    Args:
        path: the annotation file (``.csv``, ``.tsv`` or ``.json``).
        catalog: the catalog the annotations refer to.
        on_unmatched: ``"error"`` raises, listing the annotations that match no catalog item;
            ``"warn"`` drops those pairs and logs how many.
    """
    path = Path(path)
    problem = input_file_problem(path, "annotations")
    if problem:
        raise AnnotationError(f"{problem[0].upper()}{problem[1:]}.")
    suffix = path.suffix.lower()
    if suffix == ".json":
        pairs = _read_json(path)
    elif suffix in (".csv", ".tsv"):
        pairs = _read_csv(path, sep="\t" if suffix == ".tsv" else ",")
    elif suffix in POOL_SUFFIXES:
        raise AnnotationError(
            f"{path}: graded pools (candidates judged per query) are ranked pool by pool by "
            "`metricbert evaluate` and the quality tables; this command ranks the whole catalog from "
            "annotated seeds (.csv, .tsv or .json)."
        )
    else:
        raise AnnotationError(
            f"{path}: unsupported annotation format {path.suffix!r}; use .csv, .tsv or .json."
        )
    return match_annotations(pairs, catalog, source=str(path), on_unmatched=on_unmatched)


def match_annotations(
    pairs: Iterable[tuple[ItemReference, ItemReference]],
    catalog: Catalog,
    *,
    source: str,
    on_unmatched: str = "error",
) -> Annotations:
    """Ties (seed, similar item) references to catalog indices; see ``load_annotations``."""
    if on_unmatched not in ON_UNMATCHED:
        raise ValueError(f"on_unmatched must be one of {ON_UNMATCHED}; got {on_unmatched!r}.")
    index = _CatalogIndex(catalog)
    similar: dict[int, dict[int, None]] = {}  # dicts as ordered sets: file order, no repeats
    unmatched: dict[str, str] = {}
    total = dropped = self_pairs = 0
    for seed_reference, item_reference in pairs:
        total += 1
        seed, item = index.find(seed_reference), index.find(item_reference)
        for reference, found in ((seed_reference, seed), (item_reference, item)):
            if found is None:
                unmatched.setdefault(reference.describe(), reference.where)
        if seed is None or item is None:
            dropped += 1
        elif seed == item:
            self_pairs += 1
        else:
            similar.setdefault(seed, {})[item] = None

    if unmatched:
        listing = unmatched_listing(unmatched)
        if on_unmatched == "error":
            raise AnnotationError(
                f"{source}: {len(unmatched)} annotated items match no item of the catalog {catalog.source} "
                f"(matched by id, else by title with whitespace collapsed and HTML entities unescaped): {listing}. "
                "Check that this is the catalog that was annotated and that the id and text columns "
                "(--id-column/--text-columns) name its id and title, or pass on_unmatched='warn' "
                "(--on-unmatched warn) to drop these pairs."
            )
        logger.warning(
            "%s: dropped %d of %d annotation pairs whose seed or item is not in the catalog "
            "(%d unmatched: %s).",
            source,
            dropped,
            total,
            len(unmatched),
            listing,
        )
    if self_pairs:
        logger.warning("%s: ignored %d pairs that annotate a seed as similar to itself.", source, self_pairs)
    if index.ambiguous:
        examples = ", ".join(repr(title) for title in sorted(index.ambiguous)[:5])
        logger.warning(
            "%s: %d annotated titles name several catalog items (e.g. %s); the first item is used. "
            "Annotate by id to avoid this.",
            source,
            len(index.ambiguous),
            examples,
        )
    if not similar:
        raise AnnotationError(
            f"{source}: none of its {total} pairs can be used with the catalog {catalog.source}."
        )
    return Annotations(similar={seed: tuple(items) for seed, items in similar.items()}, source=source)


def unmatched_listing(unmatched: dict[str, str]) -> str:
    """The first unmatched references (name -> where it stands) for a message, and how many more."""
    listing = "; ".join(f"{name} ({where})" for name, where in list(unmatched.items())[:_LISTED_UNMATCHED])
    if len(unmatched) > _LISTED_UNMATCHED:
        listing += f"; and {len(unmatched) - _LISTED_UNMATCHED} more"
    return listing


class _CatalogIndex:
    """Finds catalog items by id, else by normalised title (raw and HTML-unescaped both tried)."""

    def __init__(self, catalog: Catalog) -> None:
        self.by_id = {item_id: position for position, item_id in enumerate(catalog.ids)}
        self.by_title: dict[str, list[int]] = {}
        for position, title in enumerate(catalog.display_titles):
            for key in _title_keys(title):
                self.by_title.setdefault(key, []).append(position)
        self.ambiguous: set[str] = set()

    def find(self, reference: ItemReference) -> int | None:
        if reference.id is not None and reference.id in self.by_id:
            return self.by_id[reference.id]
        if reference.title is None:
            return None
        for key in _title_keys(reference.title):
            positions = self.by_title.get(key)
            if positions:
                if len(positions) > 1:
                    self.ambiguous.add(reference.title)
                return positions[0]
        return None


def _title_keys(title: str) -> list[str]:
    return list(dict.fromkeys(" ".join(text.split()) for text in (title, html.unescape(title))))


def _read_csv(path: Path, sep: str) -> list[tuple[ItemReference, ItemReference]]:
    try:
        frame = read_csv_strings(path, sep)
    except UnicodeDecodeError as error:
        raise AnnotationError(not_utf8_message(path, error)) from error
    except (ValueError, pd.errors.ParserError) as error:
        raise AnnotationError(f"{path}: cannot be parsed as CSV: {error}") from error
    frame = frame.apply(lambda column: column.str.strip()).replace("", None)

    roles: dict[tuple[str, str], str] = {}
    for column in frame.columns:
        role = _CSV_COLUMNS.get(" ".join(column.strip().lower().replace("_", " ").split()))
        if role is not None:
            roles.setdefault(role, column)
    for whose in ("seed", "recommended"):
        if not any((whose, what) in roles for what in ("id", "url", "title")):
            raise AnnotationError(
                f"{path}: no {whose} column; expected '{whose}_id', '{whose} url' or '{whose} title' "
                f"(case and '_' vs space do not matter), found {list(frame.columns)}."
            )

    def column(whose: str, what: str) -> str | None:
        return roles.get((whose, what))

    seed_columns = [
        name for name in (column("seed", "id"), column("seed", "url"), column("seed", "title")) if name
    ]
    # The sommelier file fills a seed's cells on its first row only: carry each seed down to the
    # rows below it, as a whole, so that no row mixes two seeds' cells.
    starts = frame[seed_columns].notna().any(axis=1)
    if len(frame) and not starts.iloc[0]:
        raise AnnotationError(
            f"{path}: line 2 names no seed, so its rows belong to no seed; fill {seed_columns}."
        )
    group = starts.cumsum()
    seeds = frame.loc[starts, seed_columns].set_axis(group[starts].to_numpy())
    frame[seed_columns] = seeds.loc[group.to_numpy()].to_numpy()

    pairs = []
    for position, row in enumerate(frame.itertuples(index=False)):
        values = dict(zip(frame.columns, row, strict=True))
        where = f"line {position + 2}"  # header line and 1-based lines
        seed = _reference(
            values, column("seed", "id") or column("seed", "url"), column("seed", "title"), where
        )
        item = _reference(
            values,
            column("recommended", "id") or column("recommended", "url"),
            column("recommended", "title"),
            where,
        )
        if item is not None:  # a seed row without a recommendation
            pairs.append((seed, item))
    return pairs


def _reference(
    values: dict, id_column: str | None, title_column: str | None, where: str
) -> ItemReference | None:
    item_id = values[id_column] if id_column else None
    title = values[title_column] if title_column else None
    item_id, title = (value if isinstance(value, str) else None for value in (item_id, title))
    if item_id is None and title is None:
        return None
    return ItemReference(id=item_id, title=title, where=where)


def _read_json(path: Path) -> list[tuple[ItemReference, ItemReference]]:
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as error:
        raise AnnotationError(not_utf8_message(path, error)) from error
    # ValueError also covers an integer too long to convert; RecursionError, arrays nested too deep.
    except (ValueError, RecursionError) as error:
        raise AnnotationError(f"{path}: not valid JSON ({error}).") from error
    if not isinstance(content, dict):
        raise AnnotationError(
            f"{path}: expected an object {{seed_title: {{similar_title: 1, ...}}}}; "
            f"got a {type(content).__name__}."
        )
    pairs = []
    for seed_title, similar in content.items():
        where = f"seed {seed_title!r}"
        if isinstance(similar, dict):
            # Relevance values: keep the positive ones (0 would mark a judged-dissimilar item).
            titles = [title for title, relevance in similar.items() if relevance]
        elif isinstance(similar, list) and all(isinstance(title, str) for title in similar):
            titles = similar
        else:
            raise AnnotationError(
                f"{path}: the entry of {where} must map similar titles to 1, or list them; "
                f"got {type(similar).__name__}."
            )
        seed = ItemReference(id=None, title=seed_title, where=where)
        pairs.extend((seed, ItemReference(id=None, title=title, where=where)) for title in titles)
    return pairs
