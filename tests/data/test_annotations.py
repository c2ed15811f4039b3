from __future__ import annotations

import json
import logging

import pandas as pd
import pytest

from metricbert_trainer.data.annotations import AnnotationError, load_annotations
from metricbert_trainer.data.catalog import load_catalog


@pytest.fixture(scope="module")
def games():
    titles = [
        "Sam & Max Save the World",
        "Skull &amp; Bones (video game)",
        "Dead Island",
        "Dead Island:  Riptide",
        "Dying Light",
        "Portal",
    ]
    frame = pd.DataFrame(
        {
            "id": [f"g{i}" for i in range(len(titles))],
            "title": titles,
            "description": ["A game."] * len(titles),
        }
    )
    return load_catalog(frame)


def write_json(path, content):
    path.write_text(json.dumps(content), encoding="utf-8")
    return path


def test_proxy_annotations_match_the_wine_catalog_by_id(wines_csv, wines_annotations):
    catalog = load_catalog(wines_csv)
    annotations = load_annotations(wines_annotations, catalog)
    assert len(annotations.seeds) == 100 and annotations.num_pairs == 1000
    first = pd.read_csv(wines_annotations, dtype=str).iloc[0]
    seed = annotations.seeds[0]
    assert catalog.ids[seed] == first["seed_id"] and catalog.display_titles[seed] == first["seed_title"]
    assert catalog.ids[annotations.similar[seed][0]] == first["recommended_id"]


def test_video_games_json_with_escaping_and_whitespace(games, tmp_path):
    path = write_json(
        tmp_path / "gt.json",
        {
            "Dead Island": {"Dead Island: Riptide": 1, " Dying   Light": 1, "Portal": 0},  # 0: not similar
            "Sam &amp; Max Save the World": {"Skull & Bones (video game)": 1},
        },
    )
    annotations = load_annotations(path, games)
    assert annotations.similar == {2: (3, 4), 0: (1,)}
    assert annotations.source == str(path)


def test_sommelier_csv_carries_each_seed_down(games, tmp_path):
    path = tmp_path / "1027 expert annotations for 100 wines seeds.csv"
    path.write_text(
        "seed url,seed title,recommended url,recommended title\n"
        "https://x/2,Dead Island,https://x/3,Dead Island: Riptide\n"
        ",,https://x/4,Dying Light\n"
        "https://x/0,Sam & Max Save the World,https://x/1,Skull & Bones (video game)\n"
        ",,https://x/5,Portal\n",
        encoding="utf-8",
    )
    annotations = load_annotations(path, games)  # urls are not catalog ids: matched by title
    assert annotations.similar == {2: (3, 4), 0: (1, 5)}


def test_ids_win_over_titles_and_titles_back_them_up(games, tmp_path):
    path = tmp_path / "proxy.csv"
    path.write_text(
        "seed_id,seed_title,recommended_id,recommended_title\n"
        "g5,a stale title,g4,Dying Light\n"
        "g5,a stale title,unknown-id,Dead Island\n",
        encoding="utf-8",
    )
    assert load_annotations(path, games).similar == {5: (4, 2)}


def test_unmatched_titles_are_listed_or_dropped_with_a_count(games, tmp_path, caplog):
    path = write_json(
        tmp_path / "gt.json",
        {
            "Dead Island": {"Dying Light": 1, "Dead Island 2": 1},
            "Half-Life": {"Portal": 1},
        },
    )
    with pytest.raises(AnnotationError) as raised:
        load_annotations(path, games)
    message = str(raised.value)
    assert str(path) in message and "'Dead Island 2'" in message and "'Half-Life'" in message
    assert "on_unmatched='warn'" in message

    with caplog.at_level(logging.WARNING, logger="metricbert_trainer.data.annotations"):
        annotations = load_annotations(path, games, on_unmatched="warn")
    assert annotations.similar == {2: (4,)}
    assert "dropped 2 of 3 annotation pairs" in caplog.text


def test_self_pairs_and_repeats_are_dropped(games, tmp_path, caplog):
    path = write_json(tmp_path / "gt.json", {"Portal": ["Portal", "Dying Light", "Dying Light"]})
    with caplog.at_level(logging.WARNING, logger="metricbert_trainer.data.annotations"):
        annotations = load_annotations(path, games)
    assert annotations.similar == {5: (4,)} and annotations.num_pairs == 1
    assert "similar to itself" in caplog.text


def test_malformed_files_are_named(games, tmp_path):
    bad_columns = tmp_path / "bad.csv"
    bad_columns.write_text("query,answer\nPortal,Dying Light\n", encoding="utf-8")
    with pytest.raises(AnnotationError, match=r"no seed column.*found \['query', 'answer'\]"):
        load_annotations(bad_columns, games)
    orphan_rows = tmp_path / "orphans.csv"
    orphan_rows.write_text("seed title,recommended title\n,Portal\n", encoding="utf-8")
    with pytest.raises(AnnotationError, match="line 2 names no seed"):
        load_annotations(orphan_rows, games)
    with pytest.raises(AnnotationError, match="must map similar titles"):
        load_annotations(write_json(tmp_path / "gt.json", {"Portal": "Dying Light"}), games)
    with pytest.raises(AnnotationError, match="unsupported annotation format"):
        load_annotations(write_json(tmp_path / "gt.pkl", {}), games)
    with pytest.raises(AnnotationError, match="not found"):
        load_annotations(tmp_path / "missing.csv", games)


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("proxy.csv", "seed_title,recommended_title\nPortal,Dying Light\nPortal,Dead Island\xa0\n"),
        ("gt.json", '{"Portal": {\n"Dying Light": 1,\n"Dead Island\xa0": 1}}'),
    ],
)
def test_non_utf8_annotation_files_name_the_line(games, tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content.encode("latin-1"))
    with pytest.raises(AnnotationError, match=f"{name}: line 3 is not valid UTF-8"):
        load_annotations(path, games)


def test_first_row_with_more_fields_than_the_header_is_an_error(games, tmp_path):
    # pandas would read the extra fields as an index and shift the titles into the id columns.
    path = tmp_path / "proxy.csv"
    path.write_text("seed_title,recommended_title\nPortal,Dead Island, Riptide\n", encoding="utf-8")
    with pytest.raises(AnnotationError, match="line 2 has 3 fields but the header has 2"):
        load_annotations(path, games)


def test_json_numbers_too_long_to_convert_are_an_annotation_error(games, tmp_path):
    path = tmp_path / "gt.json"
    path.write_text('{"Portal": {"Dying Light": ' + "1" * 5000 + "}}", encoding="utf-8")
    with pytest.raises(AnnotationError, match="gt.json: not valid JSON"):
        load_annotations(path, games)
