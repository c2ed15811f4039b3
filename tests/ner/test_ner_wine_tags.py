"""The shipped wine-title tags: span location from the catalog's columns, skips counted, the split."""

from __future__ import annotations

import importlib.util
import json

import pandas as pd
import pytest
from conftest import REPO_ROOT

from metricbert_trainer.ner.tagging import spans_to_tags

BUILD = REPO_ROOT / "data" / "wines_ner" / "build_tags.py"
SHIPPED = REPO_ROOT / "data" / "wines_ner" / "wine-titles-ner.jsonl"


def build_module():
    spec = importlib.util.spec_from_file_location("build_tags", BUILD)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def row(title, winery, variety, region_1, province="P"):
    return pd.Series(
        {"title": title, "winery": winery, "variety": variety, "region_1": region_1, "province": province}
    )


def test_spans_come_from_the_columns_exactly_or_case_insensitively():
    build = build_module()
    spans, _ = build.title_spans(
        row("Trimbach 2012 gewurztraminer (Alsace)", "Trimbach", "Gewurztraminer", "Alsace")
    )
    words, tags = spans_to_tags("Trimbach 2012 gewurztraminer (Alsace)", spans)
    assert tags == ["B-WINERY", "B-VINTAGE", "B-VARIETY", "O", "B-REGION", "O"]
    # No region_1: the province is the parenthesis; no year: a non-vintage wine, kept.
    spans, _ = build.title_spans(row("Avidagos NV Red (Douro)", "Avidagos", "Red", float("nan"), "Douro"))
    assert {span.label for span in spans} == {"WINERY", "VARIETY", "REGION"}


def test_unlocatable_titles_are_skipped_with_a_reason(tmp_path):
    build = build_module()
    assert build.title_spans(
        row("Trimbach 2012 Gewurztraminer (Alsace)", "Trimbach", "Gewürztraminer", "Alsace")
    ) == (
        None,
        "variety not in the title",
    )
    catalog = tmp_path / "wines.csv"
    pd.DataFrame(
        [
            {
                "id": 1,
                "title": "A 2010 Merlot (Napa)",
                "winery": "A",
                "variety": "Merlot",
                "region_1": "Napa",
                "province": "California",
                "description": "Ripe.",
            },
            {
                "id": 2,
                "title": "B 2011 Red (Napa)",
                "winery": "B",
                "variety": "Red Blend",
                "region_1": "Napa",
                "province": "California",
                "description": "Dry.",
            },
        ]
    ).to_csv(catalog, index=False)
    rows, counts = build.build(catalog, seed=0)
    assert counts["tagged"] == 1 and counts["skipped: variety not in the title"] == 1
    assert rows[0]["tags"] == ["B-WINERY", "B-VINTAGE", "B-VARIETY", "O", "B-REGION", "O"]


def test_the_shipped_file_is_a_fixed_70_30_split_by_item():
    rows = [json.loads(line) for line in SHIPPED.read_text(encoding="utf-8").splitlines()]
    train = [item for item in rows if item["split"] == "train"]
    assert len(rows) == 3634 and len(train) == round(0.7 * len(rows))
    assert len({item["id"] for item in rows}) == len(rows)
    assert all(len(item["tokens"]) == len(item["tags"]) and item["description"] for item in rows)


def _entities(rows: list[dict], label: str) -> set[str]:
    build = build_module()
    return {build.entity_text(row, label) for row in rows}


@pytest.mark.parametrize(("column", "label"), [("split_winery", "WINERY"), ("split_variety", "VARIETY")])
def test_the_entity_disjoint_splits_share_no_winery_or_variety_between_splits(column, label):
    rows = [json.loads(line) for line in SHIPPED.read_text(encoding="utf-8").splitlines()]
    parts = {name: [row for row in rows if row[column] == name] for name in ("train", "validation", "test")}
    assert sum(map(len, parts.values())) == len(rows)
    assert (
        abs(len(parts["test"]) - 0.3 * len(rows)) < 40
        and abs(len(parts["validation"]) - 0.1 * len(rows)) < 60
    )
    entities = {name: _entities(part, label) for name, part in parts.items()}
    assert not entities["test"] & entities["train"] and not entities["test"] & entities["validation"]
    assert not entities["validation"] & entities["train"]


def test_the_random_split_keeps_the_recipes_test_titles_and_takes_validation_from_its_training_ones():
    rows = [json.loads(line) for line in SHIPPED.read_text(encoding="utf-8").splitlines()]
    assert all((row["split_random"] == "test") == (row["split"] == "test") for row in rows)
    validation = [row for row in rows if row["split_random"] == "validation"]
    assert all(row["split"] == "train" for row in validation) and len(validation) == 364
