"""Loading a catalog: items with an id and two or more text fields (title, description, ...).

Everything downstream (collator, trainer, inference, evaluation) sees a ``datasets.Dataset`` with
a string ``id`` column and one column per text field, so a wine, a video game or a user's product
is just a catalog item. Real catalogs are messy: the loader names the file, the row and the
column when something is wrong, and skips empty texts with a count unless asked to be strict.
"""

from __future__ import annotations

import json
import logging
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import datasets
import pandas as pd

from metricbert_trainer.data.input_files import input_file_problem
from metricbert_trainer.errors import UsageError

logger = logging.getLogger(__name__)

SUPPORTED_SUFFIXES = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".parquet": "parquet",
}


# How each way of loading a catalog says "no id column": the same advice must be followable from
# a recipe's YAML, a recipe's command line, the metricbert commands and Python.
NUMBER_THE_ROWS = (
    "number the rows instead (id_column: null in a recipe's YAML, --id_column '' on its command line, "
    "--id-column '' for the metricbert commands, id_column=None in Python)"
)


class CatalogError(UsageError):
    """A catalog that cannot be used as it is; the message says where and what to do."""


@dataclass(frozen=True)
class Catalog:
    """A loaded catalog: ``dataset`` has an ``id`` column (strings) and one column per field."""

    dataset: datasets.Dataset
    fields: tuple[str, ...]
    source: str

    def __len__(self) -> int:
        return len(self.dataset)

    @property
    def ids(self) -> list[str]:
        return self.column("id")

    def texts(self, field: str) -> list[str]:
        return self.column(field)

    @property
    def display_titles(self) -> list[str]:
        """The first field, which is what people recognise an item by."""
        return self.column(self.fields[0])

    def column(self, name: str) -> list[str]:
        """The column ``name`` as a Python list. ``datasets`` hands out a lazy column whose every row,
        iterated, goes through its formatter (about 5 us a row: 10 s for the two million texts of a
        million items, paid by every fit, fingerprint and encoding that reads them); slicing it
        converts the whole column at once (a hundredth of that)."""
        return self.dataset[name][:]


def load_catalog(
    source: str | Path | datasets.Dataset | pd.DataFrame,
    *,
    id_column: str | None = "id",
    text_columns: Sequence[str] = ("title", "description"),
    strict: bool = False,
    min_items: int = 2,
    name: str | None = None,
) -> Catalog:
    """Reads a catalog from a CSV/TSV/JSONL/Parquet file, a ``datasets.Dataset`` or a DataFrame.

    Args:
        source: the file path, or an in-memory table.
        id_column: the column holding unique item ids; ``None`` numbers the rows from 0.
        text_columns: the text fields, in order; the first is the title, shown in listings.
        strict: raise on empty or missing texts instead of skipping those items.
        min_items: fewer usable items than this is an error (a batch needs negatives).
        name: what messages and ``Catalog.source`` call an in-memory table (e.g. its Hub id).
    """
    text_columns = tuple(text_columns)
    if len(text_columns) < 2:
        raise CatalogError(
            f"A catalog needs at least two text columns (title, description); got {text_columns}."
        )
    if len(set(text_columns)) != len(text_columns):
        raise CatalogError(f"text_columns repeats a column: {text_columns}.")
    frame, read_name = _read_table(source)
    name = name or read_name
    require_columns(
        frame,
        name,
        ([id_column] if id_column is not None else []) + list(text_columns),
        "id_column/text_columns (or --id_column/--text_columns)",
    )

    ids = frame[id_column] if id_column is not None else pd.Series(range(len(frame)), index=frame.index)
    # Ids that are strings are cleaned as texts are; numbers value by value (see _id_or_none).
    ids = _texts_or_none(ids) if _holds_strings(ids) else ids.map(_id_or_none)
    missing = ids.isna()
    if missing.any():
        raise CatalogError(
            f"{name}: column {id_column!r} is empty or missing in {int(missing.sum())} rows "
            f"(first file lines: {_first_file_lines(missing)}); fill them, or {NUMBER_THE_ROWS}."
        )
    duplicated = ids[ids.duplicated(keep=False)]
    if len(duplicated):
        examples = ", ".join(sorted(set(duplicated.head(10))))
        raise CatalogError(
            f"{name}: column {id_column!r} has {duplicated.nunique()} duplicated ids (e.g. {examples}); "
            f"ids must be unique, or {NUMBER_THE_ROWS}."
        )

    table = pd.DataFrame({"id": ids})
    usable = pd.Series(True, index=frame.index)
    for column in text_columns:
        texts = _texts_or_none(frame[column])
        empty = texts.isna()
        if empty.any():
            if strict:
                raise CatalogError(
                    f"{name}: column {column!r} is empty or missing in {int(empty.sum())} rows "
                    f"(first file lines: {_first_file_lines(empty)}); fill them or drop strict mode to skip those items."
                )
            logger.warning("%s: skipping %d items with an empty %r.", name, int(empty.sum()), column)
        usable &= ~empty
        table[column] = texts
    table = table[usable.to_numpy()].reset_index(drop=True)
    if len(table) < min_items:
        raise CatalogError(f"{name}: only {len(table)} usable items; at least {min_items} are needed.")
    dataset = datasets.Dataset.from_pandas(table, preserve_index=False)
    logger.info("Loaded %d items with fields %s from %s.", len(dataset), text_columns, name)
    return Catalog(dataset=dataset, fields=text_columns, source=name)


def catalog_column(
    source: str | Path | datasets.Dataset | pd.DataFrame,
    catalog: Catalog,
    column: str,
    *,
    id_column: str | None = "id",
) -> list[str]:
    """The values of another ``column`` of the catalog's source, one per item of ``catalog``, in
    its order (empty values as ``"(none)"``).

    For displays only, such as colouring a plot: ``load_catalog`` keeps the text fields alone so
    that no model or score can read metadata that annotations may be derived from.
    """
    frame, name = _read_table(source)
    if column not in frame.columns:
        raise CatalogError(f"{name}: no column {column!r}; the columns found are {list(frame.columns)}.")
    ids = frame[id_column] if id_column is not None else pd.Series(range(len(frame)), index=frame.index)
    values = dict(zip(ids.map(_id_or_none), frame[column].map(_text_or_none), strict=True))
    return [values.get(item) or "(none)" for item in catalog.ids]


def degenerate_text_warnings(texts: dict[str, Sequence[str]]) -> list[str]:
    """What in a catalog's texts (one sequence per field, title first) gives the pair objectives
    nothing to learn from, with counts; empty for a healthy catalog.

    Items whose fields all hold one text make anchor and positive the same text; items sharing a
    field's text with another make each other's negatives as close as their positives. Exact
    duplicates only (after the whitespace the loader strips): a catalog is not rewritten here.
    """
    names = list(texts)
    count = len(texts[names[0]]) if names else 0
    warnings = []
    if len(names) > 1:
        same = sum(len({texts[name][row] for name in names}) == 1 for row in range(count))
        if same:
            warnings.append(
                f"{same} of {count} items have one text in every field ({', '.join(names)}): their anchor and "
                "positive are the same text, which teaches the pair objective nothing"
            )
    for name in names:
        frequency = Counter(texts[name])
        shared = sum(times for times in frequency.values() if times > 1)
        if shared:
            distinct = sum(1 for times in frequency.values() if times > 1)
            warnings.append(
                f"{shared} of {count} items share their {name} with another item ({distinct} distinct {'text' if distinct == 1 else 'texts'} among "
                f"them): a negative with the same {name} cannot be told apart from the positive"
            )
    return warnings


def _read_table(source: str | Path | datasets.Dataset | pd.DataFrame) -> tuple[pd.DataFrame, str]:
    if isinstance(source, datasets.Dataset):
        return source.to_pandas(), "the given dataset"
    if isinstance(source, pd.DataFrame):
        return source.reset_index(drop=True), "the given DataFrame"
    path = Path(source)
    return read_catalog_file(path), str(path)


def read_catalog_file(path: Path, kind: str | None = None) -> pd.DataFrame:
    """The table in the file ``path``, read as ``kind`` (csv, tsv, jsonl or parquet; by default the
    one its suffix names). Every failure is a ``CatalogError`` naming the file, and for bytes that
    are not UTF-8 the line."""
    problem = input_file_problem(path, "catalog")
    if problem:
        raise CatalogError(f"{problem[0].upper()}{problem[1:]}.")
    kind = kind or SUPPORTED_SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise CatalogError(
            f"{path}: unsupported catalog format {path.suffix!r}; use one of {sorted(SUPPORTED_SUFFIXES)}."
        )
    if kind == "csv" and _looks_tab_separated(path):
        raise CatalogError(
            f"{path}: this looks tab-separated (its first line has more tab-separated fields than "
            "comma-separated ones): name it .tsv, or write it with commas."
        )
    try:
        if kind in ("csv", "tsv"):
            return read_csv_strings(path, sep="\t" if kind == "tsv" else ",")
        if kind == "jsonl":
            return pd.read_json(path, lines=True, dtype=False, encoding="utf-8")
        return pd.read_parquet(path)
    except UnicodeDecodeError as error:
        raise CatalogError(not_utf8_message(path, error)) from error
    # TypeError: a JSONL line that is not an object; OSError: pyarrow on a damaged Parquet file.
    except (ValueError, TypeError, OSError, pd.errors.ParserError) as error:
        where = _first_bad_json_line(path) if kind == "jsonl" else None
        if where:
            raise CatalogError(f"{path}: line {where[0]} is not a JSON object ({where[1]}).") from error
        raise CatalogError(f"{path}: cannot be parsed as {kind}: {error}") from error


def _first_bad_json_line(path: Path) -> tuple[int, str] | None:
    """The first line of a JSON-lines file that is not a JSON object, and why: pandas names a
    byte position, which no editor shows."""
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError as error:
                return number, str(error)
            if not isinstance(value, dict):
                kinds = {list: "an array", str: "a string", bool: "true or false", type(None): "null"}
                return number, kinds.get(type(value), "a number")
    return None


def _looks_tab_separated(path: Path) -> bool:
    """Whether the header of a file named .csv splits into more fields at tabs than at commas."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        header = handle.readline()
    return header.count("\t") > header.count(",")


def read_csv_strings(path: Path, sep: str) -> pd.DataFrame:
    """Reads a CSV/TSV file with every cell as a string, so that '007' stays '007' and 'NA' stays
    a word; empty cells are NaN.

    Raises pandas' ``UnicodeDecodeError`` and ``ValueError``, and a ``ValueError`` when the first row
    has more fields than the header, which pandas would otherwise quietly read as the row's index,
    shifting every column (a later such row is already a parser error).
    """
    frame = pd.read_csv(path, sep=sep, dtype=str, keep_default_na=False, na_values=[""], encoding="utf-8")
    if not isinstance(frame.index, pd.RangeIndex):
        raise ValueError(
            f"line 2 has {frame.index.nlevels + len(frame.columns)} fields but the header has "
            f"{len(frame.columns)}; quote the texts that contain the separator {sep!r}"
        )
    return frame


def not_utf8_message(path: Path, error: UnicodeDecodeError) -> str:
    """What to say about a file that is not valid UTF-8: which line, and what to do."""
    return (
        f"{path}: line {_first_invalid_utf8_line(path)} is not valid UTF-8 ({error.reason}); "
        "re-encode the file as UTF-8."
    )


def _first_invalid_utf8_line(path: Path) -> int:
    """The 1-based number of the file's first line that is not valid UTF-8 (0 if none is).

    Parsers decode in chunks, so a decoding error's offset is not the file's: scan line by line.
    """
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                return number
    return 0


def require_columns(frame: pd.DataFrame, name: str, wanted: Sequence[str], options: str) -> None:
    """A ``CatalogError`` listing the columns found when any of ``wanted`` is missing; ``options``
    names the settings that say which columns to read."""
    missing = [column for column in wanted if column not in frame.columns]
    if missing:
        raise CatalogError(
            f"{name}: missing column(s) {missing}; the columns found are {list(frame.columns)}. "
            f"Set {options} to the names your file uses."
        )


def _first_file_lines(flagged: pd.Series) -> list[int]:
    """The file lines of the first ten flagged rows: +2 for the header line and 1-based lines."""
    return [int(index) + 2 for index in flagged[flagged].index[:10]]


def _text_or_none(value: object) -> str | None:
    # pd.isna covers None, NaN of any float type, pd.NA and NaT, which str() would turn into words.
    if pd.api.types.is_scalar(value) and pd.isna(value):
        return None
    text = str(value).strip()
    return None if _shows_nothing(text) else text


def _shows_nothing(text: str) -> bool:
    """Whether ``text`` holds no visible character: only white space and format characters
    (zero-width spaces and joiners, U+FEFF, direction marks), which a title made of them hides:
    such a text is as empty as a blank one, and two of them would rank as each other's twins."""
    return all(character.isspace() or unicodedata.category(character) == "Cf" for character in text)


def _holds_strings(column: pd.Series) -> bool:
    """Whether ``column`` holds strings and missing values only."""
    return pd.api.types.infer_dtype(column, skipna=True) in ("string", "empty")


def _texts_or_none(column: pd.Series) -> pd.Series:
    """``_text_or_none`` of every value of ``column``. A column of strings (and missing values), what
    a CSV, JSONL or Parquet file's text column is, is cleaned vectorised: a value at a time took
    1.5 s per million texts, a third of a million-item ``recommend`` call's catalog read."""
    if not _holds_strings(column):
        return column.map(_text_or_none)  # numbers, bytes, lists: str() of each, as ever
    texts = column.str.strip()
    shown = texts.notna() & texts.ne("")
    # Only a text beyond ASCII can hold format characters alone (``_shows_nothing``).
    wide = shown & ~texts.str.isascii().fillna(True).astype(bool)
    shown[wide] = ~texts[wide].map(_shows_nothing).astype(bool)
    return texts.where(shown)


def _id_or_none(value: object) -> str | None:
    # Integer-valued floats (pandas turns int columns with gaps into floats) print without '.0'.
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return _text_or_none(value)
