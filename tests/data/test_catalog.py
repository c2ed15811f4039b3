import json

import datasets
import pandas as pd
import pytest

from metricbert_trainer.data.catalog import CatalogError, load_catalog

ITEMS = [
    {"sku": "a1", "name": "Red one", "text": "Cherry and plum."},
    {"sku": "b2", "name": "White one", "text": "Lemon and flint."},
    {"sku": "c3", "name": "Rosé", "text": "Strawberry, dry."},
]


def test_wine_sample_loads_with_default_columns(wines_csv, caplog):
    with caplog.at_level("WARNING"):
        catalog = load_catalog(wines_csv)
    assert len(catalog) == 5810  # one row has an empty title and is skipped with a count
    assert "skipping 1 items with an empty 'title'" in caplog.text
    assert catalog.fields == ("title", "description")
    assert catalog.ids[:2] == ["0", "1"]
    assert set(catalog.dataset.column_names) == {"id", "title", "description"}  # no metadata columns
    # Whole Python lists, not datasets' lazy columns, whose rows each cost a formatter call when
    # iterated (seconds per pass at a million items).
    for column in (catalog.ids, catalog.texts("description"), catalog.display_titles):
        assert type(column) is list and len(column) == 5810 and isinstance(column[-1], str)


@pytest.mark.parametrize("suffix", ["csv", "jsonl", "parquet"])
def test_formats_and_column_names(tmp_path, suffix):
    path = tmp_path / f"items.{suffix}"
    frame = pd.DataFrame(ITEMS)
    if suffix == "csv":
        frame.to_csv(path, index=False)
    elif suffix == "jsonl":
        path.write_text("\n".join(json.dumps(item) for item in ITEMS), encoding="utf-8")
    else:
        frame.to_parquet(path)
    catalog = load_catalog(path, id_column="sku", text_columns=["name", "text"])
    assert catalog.ids == ["a1", "b2", "c3"]
    assert catalog.texts("text")[2] == "Strawberry, dry."


def test_datasets_dataset_and_row_numbers_as_ids():
    catalog = load_catalog(datasets.Dataset.from_list(ITEMS), id_column=None, text_columns=["name", "text"])
    assert catalog.ids == ["0", "1", "2"]


def test_missing_column_lists_the_columns_found(tmp_path):
    path = tmp_path / "items.csv"
    pd.DataFrame(ITEMS).to_csv(path, index=False)
    with pytest.raises(
        CatalogError, match=r"missing column\(s\) \['title'.*columns found are \['sku', 'name', 'text'\]"
    ):
        load_catalog(path, id_column="sku")


def test_missing_file_and_unknown_format(tmp_path):
    with pytest.raises(CatalogError, match="not found"):
        load_catalog(tmp_path / "nope.csv")
    (tmp_path / "items.xml").write_text("<a/>")
    with pytest.raises(CatalogError, match="unsupported catalog format"):
        load_catalog(tmp_path / "items.xml")


def test_empty_texts_skipped_or_rejected_when_strict(tmp_path):
    path = tmp_path / "items.csv"
    pd.DataFrame(ITEMS + [{"sku": "d4", "name": "  ", "text": "x"}]).to_csv(path, index=False)
    assert len(load_catalog(path, id_column="sku", text_columns=["name", "text"])) == 3
    with pytest.raises(CatalogError, match=r"empty or missing in 1 rows \(first file lines: \[5\]\)"):
        load_catalog(path, id_column="sku", text_columns=["name", "text"], strict=True)


def test_duplicate_ids_rejected(tmp_path):
    path = tmp_path / "items.csv"
    pd.DataFrame(ITEMS + [ITEMS[0]]).to_csv(path, index=False)
    with pytest.raises(
        CatalogError, match="duplicated ids .*a1.*id_column: null in a recipe's YAML, --id_column ''"
    ):
        load_catalog(path, id_column="sku", text_columns=["name", "text"])


def test_non_utf8_names_the_line(tmp_path):
    path = tmp_path / "items.csv"
    path.write_bytes("sku,name,text\na1,ok,fine\nb2,caf\xe9,latin-1 here\n".encode("latin-1"))
    with pytest.raises(CatalogError, match="line 3 is not valid UTF-8"):
        load_catalog(path, id_column="sku", text_columns=["name", "text"])


def test_too_few_items(tmp_path):
    path = tmp_path / "items.csv"
    pd.DataFrame(ITEMS[:1]).to_csv(path, index=False)
    with pytest.raises(CatalogError, match="only 1 usable items"):
        load_catalog(path, id_column="sku", text_columns=["name", "text"])


def test_non_utf8_jsonl_names_the_line(tmp_path):
    path = tmp_path / "items.jsonl"
    lines = [json.dumps(item) for item in ITEMS]
    lines[1] = lines[1].replace("White one", "Blanc s\xe9c")
    path.write_bytes("\n".join(lines).encode("latin-1"))
    with pytest.raises(CatalogError, match="items.jsonl: line 2 is not valid UTF-8"):
        load_catalog(path, id_column="sku", text_columns=["name", "text"])


def test_missing_ids_are_rejected_with_their_lines(tmp_path):
    path = tmp_path / "items.csv"
    path.write_text("sku,name,text\na1,Red one,Cherry.\n,White one,Lemon.\n  ,Rosé,Dry.\n", encoding="utf-8")
    with pytest.raises(
        CatalogError, match=r"'sku' is empty or missing in 2 rows \(first file lines: \[3, 4\]\)"
    ):
        load_catalog(path, id_column="sku", text_columns=["name", "text"])
    frame = pd.DataFrame(ITEMS).astype(object)
    frame.loc[0, "sku"] = None  # not the word 'None' or 'nan' as an id
    with pytest.raises(CatalogError, match="'sku' is empty or missing in 1 rows"):
        load_catalog(frame, id_column="sku", text_columns=["name", "text"])


def test_missing_values_of_any_kind_are_empty_texts(caplog):
    frame = pd.DataFrame(ITEMS + [{"sku": "d4", "name": "Orange one", "text": "Apricot."}]).astype(object)
    frame.loc[1, "name"], frame.loc[2, "text"] = pd.NA, pd.NaT  # not the words '<NA>' and 'NaT'
    catalog = load_catalog(frame, id_column="sku", text_columns=["name", "text"])
    assert catalog.ids == ["a1", "d4"]


def test_texts_are_stripped_and_blank_ones_skipped_in_string_and_mixed_columns():
    """A column of strings is cleaned vectorised, one holding numbers or bytes a value at a time:
    both give each text stripped, and skip the blank and missing ones."""
    names = ["  Red one ", "\tWhite one\n", "   ", None, "Rosé"]
    mixed = [3, b"brut", " Dry. ", pd.NA, ""]
    for dtype in ("str", object, "string"):
        frame = pd.DataFrame({"sku": ["a", "b", "c", "d", "e"], "name": names, "text": ["x"] * 5})
        frame["name"] = frame["name"].astype(dtype)
        catalog = load_catalog(frame, id_column="sku", text_columns=["name", "text"])
        assert catalog.ids == ["a", "b", "e"] and catalog.texts("name") == ["Red one", "White one", "Rosé"]
    frame = pd.DataFrame({"sku": ["a", "b", "c", "d", "e"], "name": ["n"] * 5, "text": mixed})
    catalog = load_catalog(frame, id_column="sku", text_columns=["name", "text"])
    assert catalog.texts("text") == ["3", "b'brut'", "Dry."]


def test_first_row_with_more_fields_than_the_header_is_an_error(tmp_path):
    # pandas would read the extra fields as an index and shift every column by two.
    path = tmp_path / "items.csv"
    path.write_text(
        "sku,name,text\na1,Red one,Cherry, plum and spice\nb2,White one,Lemon.\n", encoding="utf-8"
    )
    with pytest.raises(CatalogError, match="line 2 has 4 fields but the header has 3; quote the texts"):
        load_catalog(path, id_column="sku", text_columns=["name", "text"])


def test_unreadable_jsonl_and_parquet_are_catalog_errors(tmp_path):
    jsonl = tmp_path / "items.jsonl"
    jsonl.write_text(json.dumps(ITEMS[0]) + "\nnull\n", encoding="utf-8")
    with pytest.raises(CatalogError, match=r"items.jsonl: line 2 is not a JSON object \(null\)"):
        load_catalog(jsonl, id_column="sku", text_columns=["name", "text"])
    parquet = tmp_path / "items.parquet"
    pd.DataFrame(ITEMS).to_parquet(parquet)
    parquet.write_bytes(parquet.read_bytes()[:4] + b"\0" * 8 + parquet.read_bytes()[-8:])  # damaged
    with pytest.raises(CatalogError, match="cannot be parsed as parquet"):
        load_catalog(parquet, id_column="sku", text_columns=["name", "text"])


def test_a_pipe_or_a_folder_given_as_an_input_is_named_for_what_it_is(tmp_path, tiny_model_path, capsys):
    """A named pipe (what a shell's <(...) hands a command) and a folder, given as the catalog or
    the annotations, to the loaders, to a command and to a recipe's preflight (issue #90: the
    recipe called a pipe a folder, recommend and evaluate called it missing)."""
    import os

    from metricbert_trainer.cli import main
    from metricbert_trainer.data.annotations import AnnotationError, load_annotations

    pipe = tmp_path / "catalog.csv"
    os.mkfifo(pipe)
    with pytest.raises(
        CatalogError, match=r"Catalog must be a regular file; .*catalog.csv is a pipe \(as a shell"
    ):
        load_catalog(pipe)
    with pytest.raises(CatalogError, match=r"Catalog must be a file; .* is a folder"):
        load_catalog(tmp_path)
    with pytest.raises(
        CatalogError, match=r"/dev/fd/987 is a shell's <\(...\) pipe that this process did not"
    ):
        load_catalog("/dev/fd/987")  # what a launched process is named when the pipe stayed behind
    catalog = load_catalog(pd.DataFrame({"id": ["a", "b"], "title": ["t", "u"], "description": ["d", "e"]}))
    with pytest.raises(AnnotationError, match="Annotations must be a regular file; .* is a pipe"):
        load_annotations(pipe, catalog)
    assert main(["recommend", "--model", tiny_model_path, "--catalog", str(pipe), "--item", "a"]) == 1
    assert "is a pipe (as a shell's <(...) gives), which can be read only once" in capsys.readouterr().err

    from metricbert_trainer.errors import UsageError
    from metricbert_trainer.metricbert.config import MetricBertConfig
    from metricbert_trainer.scripts.arguments import DataArguments, ModelArguments, parse_recipe_args
    from metricbert_trainer.scripts.preflight import check_recipe_arguments

    flags = [
        "--model_name_or_path",
        tiny_model_path,
        "--catalog",
        str(pipe),
        "--output_dir",
        str(tmp_path / "o"),
    ]
    with pytest.raises(UsageError, match="catalog must be a regular file; .* is a pipe"):
        check_recipe_arguments(*parse_recipe_args((ModelArguments, DataArguments, MetricBertConfig), flags))


def test_a_tab_separated_file_named_csv_is_told_to_be_named_tsv(tmp_path):
    """Issue #90: pandas said "Expected 5 fields in line 6, saw 7", or the loader asked for
    id_column and text_columns; the file is simply tab-separated. A comma in a text does not
    mislead it, and the same file named .tsv loads."""
    rows = ["id\ttitle\tdescription", "1\tA, red\tDry, firm", "2\tB\tSoft, round, ripe"]
    path = tmp_path / "items.csv"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    with pytest.raises(CatalogError, match=r"items.csv: this looks tab-separated .*: name it .tsv"):
        load_catalog(path)
    assert load_catalog(path.rename(tmp_path / "items.tsv")).ids == ["1", "2"]


def test_a_text_of_format_characters_alone_is_empty(tmp_path, caplog):
    """Titles of zero-width characters only (U+200B, U+200D, U+FEFF) ranked as each other's
    twins (issue #90); like blank ones they are skipped with the same warning. A title that holds
    one beside visible text keeps it."""
    frame = pd.DataFrame(
        {
            "id": ["a", "b", "c", "d", "e"],
            "title": ["\u200b\u200d", " \ufeff ", "Rosé\u200b wine", "   ", "Plain"],
            "description": ["one", "two", "three", "four", "five"],
        }
    )
    path = tmp_path / "items.csv"
    frame.to_csv(path, index=False)
    for source in (path, frame.astype(object).assign(title=[*frame.title[:4], 7])):
        catalog = load_catalog(source)
        assert catalog.ids == ["c", "e"]
        assert catalog.texts("title")[0] == "Rosé\u200b wine"
    assert "skipping 3 items with an empty 'title'" in caplog.text


def test_a_malformed_json_line_is_named_by_its_line(tmp_path):
    path = tmp_path / "items.jsonl"
    lines = ['{"id": 1, "title": "a", "description": "b"}', "", '{"id": 2, "title": "c", "description": }']
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(CatalogError, match=r"items.jsonl: line 3 is not a JSON object \(Expecting value"):
        load_catalog(path)
    path.write_text('{"id": 1, "title": "a", "description": "b"}\n[1, 2]\n', encoding="utf-8")
    with pytest.raises(CatalogError, match=r"line 2 is not a JSON object \(an array\)"):
        load_catalog(path)
