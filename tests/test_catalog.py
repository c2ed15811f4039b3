import json

import datasets
import pandas as pd
import pytest

from metricbert_trainer.catalog import CatalogError, load_catalog

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
    with pytest.raises(CatalogError, match="duplicated ids .*a1"):
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
