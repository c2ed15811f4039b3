"""Loading tagged catalogs from real files: CoNLL-style lists, character spans, and the errors."""

from __future__ import annotations

import json

import pytest

from metricbert_trainer.data.catalog import CatalogError
from metricbert_trainer.ner.dataset import load_tagged_catalog
from metricbert_trainer.ner.tagging import TaggingError


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def conll_row(item, split, tags=("B-W", "O", "B-R")):
    return {
        "id": item,
        "tokens": ["Acme", "2015", "Napa"],
        "tags": list(tags),
        "description": "d",
        "split": split,
    }


def test_conll_lists_load_with_their_labels(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [conll_row("a", "train"), conll_row("b", "test")])
    catalog = load_tagged_catalog(path)
    assert catalog.labels == ["O", "B-R", "I-R", "B-W", "I-W"]
    assert catalog.train["title"] == ["Acme 2015 Napa"]
    assert catalog.test["tags"] == [["B-W", "O", "B-R"]]


def test_character_spans_become_tags(tmp_path):
    rows = [
        {
            "id": 1,
            "title": "Acme 2015 (Napa)",
            "spans": [[0, 4, "W"], {"start": 11, "end": 15, "label": "R"}],
            "description": "d",
            "split": split,
        }
        for split in ("train", "test")
    ]
    catalog = load_tagged_catalog(write_jsonl(tmp_path / "s.jsonl", rows), spans_column="spans")
    assert catalog.test["tokens"] == [["Acme", "2015", "(", "Napa", ")"]]
    assert catalog.test["tags"] == [["B-W", "O", "O", "B-R", "O"]]


def test_misaligned_tags_name_the_file_and_row(tmp_path):
    path = write_jsonl(
        tmp_path / "bad.jsonl", [conll_row("a", "train"), conll_row("b", "test", tags=("B-W", "O"))]
    )
    with pytest.raises(TaggingError, match=r"bad.jsonl, row 2: 3 tokens but 2 tags"):
        load_tagged_catalog(path)
    path = write_jsonl(tmp_path / "tag.jsonl", [conll_row("a", "train", tags=("B-W", "O", "WINERY"))])
    with pytest.raises(TaggingError, match=r"row 1: 'WINERY' is not a BIO tag"):
        load_tagged_catalog(path)
    rows = [{"id": 1, "title": "Acme 2015", "spans": [[1, 4, "W"]], "description": "d", "split": "test"}]
    with pytest.raises(TaggingError, match=r"row 1: .*word boundaries"):
        load_tagged_catalog(write_jsonl(tmp_path / "span.jsonl", rows), spans_column="spans")


def test_missing_columns_splits_and_unknown_labels_are_errors(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [conll_row("a", "train")])
    with pytest.raises(CatalogError, match="no item has split == 'test'"):
        load_tagged_catalog(path)
    with pytest.raises(CatalogError, match="missing column"):
        load_tagged_catalog(path, tags_column="labels")
    both = write_jsonl(tmp_path / "u.jsonl", [conll_row("a", "train"), conll_row("b", "test")])
    with pytest.raises(TaggingError, match=r"entity types \['R'\]"):
        load_tagged_catalog(both, labels=["O", "B-W", "I-W"])


def test_ner_evaluate_refuses_a_sentence_encoders_labels_before_loading_its_weights(tiny_model_path, capfd):
    """Issue #90: transformers' load report (the classifier missing, the pooler unexpected) was
    printed before the one line saying the folder's labels are no BIO tags."""
    from conftest import REPO_ROOT

    from metricbert_trainer.cli import main

    data = REPO_ROOT / "data" / "wines_ner" / "wine-titles-ner.jsonl"
    assert main(["ner-evaluate", "--model", tiny_model_path, "--data", str(data)]) == 1
    printed = capfd.readouterr()
    assert "'LABEL_0' is not a BIO tag" in printed.err
    assert "LOAD REPORT" not in printed.out + printed.err and "MISSING" not in printed.out + printed.err
