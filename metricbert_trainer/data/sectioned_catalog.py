"""Loading a catalog whose descriptions are sections of articles, as the video-games benchmark's.

That catalog is a CSV with a header and the columns ``title`` and ``sections``, where ``sections``
is a Python-literal list of ``(section_title, text)`` pairs holding a whole Wikipedia article; the
item's description is one chosen section ("Gameplay"). The result is the same ``Catalog`` that
``load_catalog`` returns, so nothing downstream knows that the texts came out of articles.

The literals are read with ``ast.literal_eval`` alone: a catalog is data downloaded from
elsewhere, and evaluating it would run whatever it contains. A row that is not a list of pairs of
strings is an error naming the row and the file line it starts on (quoted fields span lines, so
the two differ); items lacking the section are skipped with a count, as ``load_catalog`` skips
empty texts.
"""

from __future__ import annotations

import ast
import csv
import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import datasets
import pandas as pd

from metricbert_trainer.data.catalog import Catalog, CatalogError, read_catalog_file, require_columns

logger = logging.getLogger(__name__)

FIELDS = ("title", "description")
_LISTED_ROWS = 10
_EXCERPT_CHARS = 80
# csv's default field limit (128 KiB) is smaller than some articles; C long keeps it portable.
_NO_FIELD_LIMIT = 2**31 - 1


def load_sectioned_catalog(
    path: str | Path,
    *,
    sections: Sequence[str] = ("Gameplay",),
    title_column: str = "title",
    sections_column: str = "sections",
    strict: bool = False,
    min_items: int = 2,
) -> Catalog:
    """Reads a CSV of titles and article sections into a catalog of (title, description) items.

    Whatever its suffix (the benchmark's file is ``video_games.txt``), the file is a comma-separated
    CSV with a header. Item ids are the data rows' numbers from 0, in file order, because titles
    may repeat; skipped rows leave gaps, so an id always names the same row of the file.

    Args:
        path: the catalog file.
        sections: the section titles to describe an item by, in order of preference: the first
            one an item has, with a non-empty text, is used. Titles are compared ignoring case and
            surrounding whitespace.
        title_column: the column holding the item titles, kept as they are in the file (HTML
            entities included; annotations are matched both raw and unescaped).
        sections_column: the column holding the ``[(section_title, text), ...]`` literals.
        strict: raise on items with an empty title or none of ``sections``, instead of skipping them.
        min_items: fewer usable items than this is an error (a batch needs negatives).
    """
    wanted = _section_ranks(sections)
    if title_column == sections_column:
        raise CatalogError(f"title_column and sections_column are both {title_column!r}; name two columns.")
    path = Path(path)
    frame = read_catalog_file(path, kind="csv")
    require_columns(frame, str(path), (title_column, sections_column), "title_column/sections_column")

    ids, titles, descriptions = [], [], []
    no_title: list[int] = []
    no_section: list[int] = []
    for row, (title, cell) in enumerate(zip(frame[title_column], frame[sections_column], strict=True)):
        pairs = _parse_sections(cell, path, row, sections_column)
        title = title.strip() if isinstance(title, str) else ""
        description = _chosen_section(pairs, wanted)
        if not title:
            no_title.append(row)
        elif description is None:
            no_section.append(row)
        else:
            ids.append(str(row))
            titles.append(title)
            descriptions.append(description)

    skipped = len(no_title) + len(no_section)
    if skipped:
        reasons = (
            f"{len(no_title)} with an empty {title_column!r}, {len(no_section)} with no non-empty "
            f"section titled {' or '.join(repr(name) for name in sections)}"
        )
        if strict:
            listed = _describe_rows(path, sorted(no_title + no_section)[:_LISTED_ROWS])
            raise CatalogError(
                f"{path}: {skipped} items cannot be used ({reasons}); the first are {listed}. "
                "Fix them, add a fallback to sections, or drop strict mode to skip those items."
            )
        logger.warning("%s: skipping %d items (%s).", path, skipped, reasons)
    _warn_about_repeated_titles(path, titles)
    if len(ids) < min_items:
        raise CatalogError(f"{path}: only {len(ids)} usable items; at least {min_items} are needed.")

    table = pd.DataFrame({"id": ids, FIELDS[0]: titles, FIELDS[1]: descriptions})
    dataset = datasets.Dataset.from_pandas(table, preserve_index=False)
    logger.info(
        "Loaded %d items with fields %s from %s (section %s; %d rows skipped).",
        len(dataset),
        FIELDS,
        path,
        " else ".join(repr(name) for name in sections),
        skipped,
    )
    return Catalog(dataset=dataset, fields=FIELDS, source=str(path))


def _section_ranks(sections: Sequence[str]) -> dict[str, int]:
    """Normalised section title -> its preference (0 is the most preferred)."""
    if isinstance(sections, str):
        raise CatalogError(
            f"sections must be a list of section titles, such as [{sections!r}]; got a string."
        )
    ranks: dict[str, int] = {}
    for name in sections:
        if not isinstance(name, str) or not name.strip():
            raise CatalogError(f"sections must be non-empty section titles; got {list(sections)!r}.")
        ranks.setdefault(_section_key(name), len(ranks))
    if not ranks:
        raise CatalogError("sections must name at least one section title, such as ['Gameplay'].")
    return ranks


def _section_key(section_title: str) -> str:
    return section_title.strip().casefold()


def _parse_sections(cell: object, path: Path, row: int, column: str) -> list[tuple[str, str]]:
    """The ``(section_title, text)`` pairs of one row's cell; a malformed cell is a CatalogError."""

    def malformed(problem: str) -> CatalogError:
        return CatalogError(
            f"{path}: {_describe_rows(path, [row])}: {column!r} {problem}. "
            "Each must be a Python-literal list of (section_title, text) pairs of strings, "
            "such as [('Gameplay', 'You run and jump.')]; fix or remove that row."
        )

    if not isinstance(cell, str):  # an empty cell, or a row with fewer fields than the header
        raise malformed("is empty or missing")
    try:
        value = ast.literal_eval(cell)
    except SyntaxError as error:
        raise malformed(f"is not valid Python ({error.msg}): {_excerpt(cell)}") from error
    except ValueError as error:
        raise malformed(
            f"holds something other than literals (names, calls and operators are never evaluated): "
            f"{_excerpt(cell)}"
        ) from error
    except (TypeError, RecursionError) as error:
        raise malformed(f"is not a usable Python literal ({type(error).__name__}: {error})") from error
    if not isinstance(value, list):
        raise malformed(f"is a {type(value).__name__}, not a list: {_excerpt(cell)}")
    for position, pair in enumerate(value):
        if not (
            isinstance(pair, tuple | list) and len(pair) == 2 and all(isinstance(part, str) for part in pair)
        ):
            raise malformed(
                f"entry {position} is {_excerpt(repr(pair))}, not a (section_title, text) pair of strings"
            )
    return [tuple(pair) for pair in value]


def _chosen_section(pairs: list[tuple[str, str]], wanted: dict[str, int]) -> str | None:
    """The stripped text of the most preferred wanted section with a non-empty text, if any.

    An empty section (Wikipedia's "Gameplay" heading followed directly by subsections, say) counts
    as absent, so the next preference is used rather than the item lost.
    """
    best: tuple[int, str] | None = None
    for section_title, text in pairs:
        rank = wanted.get(_section_key(section_title))
        text = text.strip()
        if rank is not None and text and (best is None or rank < best[0]):
            best = (rank, text)
    return best[1] if best is not None else None


def _warn_about_repeated_titles(path: Path, titles: list[str]) -> None:
    counts = Counter(titles)
    repeated = [title for title, count in counts.items() if count > 1]
    if repeated:
        examples = ", ".join(repr(title) for title in repeated[:5])
        logger.warning(
            "%s: %d titles name several items (%d items in all; e.g. %s). All are kept, each with its "
            "row number as id, but annotations are matched by title and will use the first of them.",
            path,
            len(repeated),
            sum(counts[title] for title in repeated),
            examples,
        )


def _describe_rows(path: Path, rows: list[int]) -> str:
    """E.g. "data row 7 (item id '7'), starting on line 12": rows are numbered from 0, lines from 1."""
    lines = _row_start_lines(path, rows)
    starts = [str(lines.get(row, "?")) for row in rows]
    if len(rows) == 1:
        return f"data row {rows[0]} (item id '{rows[0]}'), starting on line {starts[0]}"
    numbers = ", ".join(str(row) for row in rows)
    return f"data rows {numbers} (their item ids), starting on lines {', '.join(starts)}"


def _row_start_lines(path: Path, rows: Iterable[int]) -> dict[int, int]:
    """The 1-based file line on which each of ``rows`` (data rows numbered from 0) starts.

    pandas does not say, and quoted fields span lines, so the file is read again with the csv
    module up to the last row wanted, skipping blank lines as pandas does. Only for messages.
    """
    wanted = set(rows)
    lines: dict[int, int] = {}
    previous_limit = csv.field_size_limit(_NO_FIELD_LIMIT)
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.reader(handle)
            next(reader, None)  # the header
            row = 0
            start = reader.line_num + 1
            for record in reader:
                if len(record) > 1 or any(field.strip() for field in record):
                    if row in wanted:
                        lines[row] = start
                        if len(lines) == len(wanted):
                            break
                    row += 1
                start = reader.line_num + 1
    finally:
        csv.field_size_limit(previous_limit)
    return lines


def _excerpt(text: str) -> str:
    return repr(text) if len(text) <= _EXCERPT_CHARS else repr(text[:_EXCERPT_CHARS]) + "..."
