from __future__ import annotations

import csv
import html
import json
import logging

import pytest
from conftest import VIDEO_GAMES_ANNOTATIONS, write_sectioned_catalog

from metricbert_trainer.data.annotations import load_annotations
from metricbert_trainer.data.catalog import CatalogError, load_catalog
from metricbert_trainer.data.sectioned_catalog import load_sectioned_catalog

LOGGER = "metricbert_trainer.data.sectioned_catalog"
# repr() escapes newlines, so a literal spans file lines only where it is laid out over several.
PRETTY_SECTIONS = "[\n    ('Gameplay', 'Laid out over four lines.'),\n    ('Plot', 'x'),\n]"


def test_gameplay_section_is_picked_ignoring_case_and_whitespace(tmp_path):
    path = write_sectioned_catalog(
        tmp_path / "video_games.txt",
        [
            ("  Runner  ", [("Plot", "A story."), ("  gameplay ", "  You run and jump.  ")]),
            ("Shooter", [("GAMEPLAY", "You aim."), ("Reception", "Liked.")]),
        ],
    )
    catalog = load_sectioned_catalog(path)
    assert catalog.ids == ["0", "1"]
    assert catalog.display_titles == ["Runner", "Shooter"]
    assert catalog.texts("description") == ["You run and jump.", "You aim."]
    assert catalog.fields == ("title", "description")
    assert catalog.source == str(path)
    assert set(catalog.dataset.column_names) == {"id", "title", "description"}


def test_fallback_sections_in_order_of_preference(tmp_path):
    path = write_sectioned_catalog(
        tmp_path / "games.csv",
        [
            ("Both", [("Synopsis", "The synopsis."), ("Gameplay", "The gameplay.")]),
            ("Synopsis only", [("Synopsis", "Only a synopsis.")]),
            ("Empty gameplay", [("Gameplay", "   "), ("Combat", "Sub."), ("Synopsis", "Falls back.")]),
        ],
    )
    catalog = load_sectioned_catalog(path, sections=("Gameplay", "Synopsis"))
    assert catalog.texts("description") == ["The gameplay.", "Only a synopsis.", "Falls back."]


def test_items_without_the_section_are_skipped_with_a_count_or_rejected_when_strict(tmp_path, caplog):
    path = write_sectioned_catalog(
        tmp_path / "games.csv",
        [
            ("Kept", [("Gameplay", "Kept text.")]),
            ("No gameplay", [("Plot", "A story.")]),
            ("  ", [("Gameplay", "No title.")]),
            ("Empty gameplay", "[\n    ('Gameplay', '  '),\n]"),
            ("No sections", []),
            ("Also kept", [("Gameplay", "More text.")]),
        ],
    )
    with caplog.at_level(logging.INFO, logger=LOGGER):
        catalog = load_sectioned_catalog(path)
    assert catalog.ids == ["0", "5"]  # ids are row numbers, so skipped rows leave gaps
    assert (
        "skipping 4 items (1 with an empty 'title', 3 with no non-empty section titled 'Gameplay')"
        in caplog.text
    )
    assert "Loaded 2 items" in caplog.text and "4 rows skipped" in caplog.text

    with pytest.raises(CatalogError) as error:
        load_sectioned_catalog(path, strict=True)
    assert str(path) in str(error.value)
    assert "4 items cannot be used" in str(error.value)
    # Row 3's literal is laid out over three lines, so row 4 starts on line 8.
    assert "data rows 1, 2, 3, 4 (their item ids), starting on lines 3, 4, 5, 8." in str(error.value)


def test_quotes_of_both_kinds_and_escapes_inside_texts(tmp_path):
    texts = [
        "He said \"run\", then 'jump'; it's a \"game\", isn't it?",
        "A backslash \\ and a literal \\' and \\\" pair, a tab\tand a comma, here.",
    ]
    path = write_sectioned_catalog(
        tmp_path / "games.csv",
        [
            ('"Quoted" Game, The', [("Gameplay", texts[0])]),
            ("It's a 'game'", [("Gameplay", texts[1])]),
            # Written by hand, as another tool may: double-quoted Python strings with escapes.
            ("Hand written", '[("Gameplay", "A \\"quoted\\" word, it\'s fine"), (\'Plot\', \'x\')]'),
        ],
    )
    catalog = load_sectioned_catalog(path)
    assert catalog.display_titles == ['"Quoted" Game, The', "It's a 'game'", "Hand written"]
    assert catalog.texts("description") == [texts[0], texts[1], 'A "quoted" word, it\'s fine']


def test_unicode_titles_and_texts(tmp_path):
    rows = [
        ("Pokémon Ōkami – Déjà vu", "Café, naïve, Ærø."),
        ("ファイナルファンタジー", "戦闘はターン制です。"),
        ("Emoji Quest 🎮🐉", "Collect 🍄 and ⭐; avoid 💀."),
    ]
    path = write_sectioned_catalog(
        tmp_path / "games.csv", [(title, [("Gameplay", text)]) for title, text in rows]
    )
    catalog = load_sectioned_catalog(path)
    assert list(zip(catalog.display_titles, catalog.texts("description"), strict=True)) == rows


def test_newlines_inside_fields_are_kept(tmp_path):
    text = "First paragraph.\n\nSecond paragraph,\r\nwith a Windows line end."
    path = write_sectioned_catalog(
        tmp_path / "games.csv",
        [
            ("Two\nLines", [("Gameplay", f"\n{text}\n")]),
            ("Plain", PRETTY_SECTIONS),
            ("Raw newline", "[('Gameplay', '''Typed\nover lines.''')]"),
        ],
    )
    catalog = load_sectioned_catalog(path)
    assert catalog.display_titles == ["Two\nLines", "Plain", "Raw newline"]
    assert catalog.texts("description") == [text, "Laid out over four lines.", "Typed\nover lines."]


@pytest.mark.parametrize(
    "sections, problem",
    [
        ("[('Gameplay', 'x')", r"is not valid Python \('\[' was never closed\)"),
        ("{'Gameplay': 'x'}", r"is a dict, not a list"),
        (
            "[('Gameplay', 'x', 'extra')]",
            r"entry 0 is \"\('Gameplay', 'x', 'extra'\)\", not a \(section_title",
        ),
        ("[('Gameplay', None)]", r"entry 0 is \"\('Gameplay', None\)\", not a \(section_title"),
        ("", r"is empty or missing"),
    ],
)
def test_malformed_row_names_the_file_row_and_line(tmp_path, sections, problem):
    path = write_sectioned_catalog(
        tmp_path / "video_games.txt",
        [
            ("Fine", PRETTY_SECTIONS),
            ("Broken", sections),
            ("Fine too", [("Gameplay", "Short.")]),
        ],
    )
    with pytest.raises(CatalogError, match=problem) as error:
        load_sectioned_catalog(path)
    # Row 0 spans lines 2-5, so row 1 starts on line 6.
    assert f"{path}: data row 1 (item id '1'), starting on line 6: 'sections' " in str(error.value)


def test_a_row_missing_the_sections_field_names_its_line(tmp_path):
    path = tmp_path / "games.csv"
    path.write_text(
        "title,sections\nFine,\"[('Gameplay', 'x')]\"\n\nNo sections field\n", encoding="utf-8"
    )  # pandas skips the blank line; so must the line count
    with pytest.raises(
        CatalogError, match=r"data row 1 \(item id '1'\), starting on line 4: 'sections' is empty or missing"
    ):
        load_sectioned_catalog(path)


def test_code_in_a_row_is_a_catalog_error_and_never_runs(tmp_path):
    marker = tmp_path / "ran"
    path = write_sectioned_catalog(
        tmp_path / "games.csv",
        [
            ("Fine", [("Gameplay", "x")]),
            ("Evil", f"__import__('os').system('echo hi > {marker}')"),
        ],
    )
    with pytest.raises(
        CatalogError,
        match=r"data row 1 \(item id '1'\), starting on line 3: 'sections' holds something other than literals "
        r"\(names, calls and operators are never evaluated\): \"__import__",
    ):
        load_sectioned_catalog(path)
    assert not marker.exists()


def test_row_lines_are_found_past_a_field_longer_than_the_csv_modules_limit(tmp_path):
    article = "word " * 60_000  # 300,000 characters, over csv's default 131,072
    path = write_sectioned_catalog(
        tmp_path / "games.csv", [("Long\nTitle", [("Gameplay", article)]), ("Broken", "[")]
    )
    limit = csv.field_size_limit()
    with pytest.raises(CatalogError, match=r"data row 1 \(item id '1'\), starting on line 4"):
        load_sectioned_catalog(path)
    assert csv.field_size_limit() == limit  # the process-wide limit is put back


def test_duplicate_titles_are_kept_and_warned(tmp_path, caplog):
    path = write_sectioned_catalog(
        tmp_path / "games.csv",
        [
            ("Doom", [("Gameplay", "1993.")]),
            ("Quake", [("Gameplay", "1996.")]),
            (" Doom ", [("Gameplay", "2016.")]),
        ],
    )
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        catalog = load_sectioned_catalog(path)
    assert catalog.ids == ["0", "1", "2"]
    assert catalog.display_titles == ["Doom", "Quake", "Doom"]
    assert "1 titles name several items (2 items in all; e.g. 'Doom')" in caplog.text
    assert "annotations are matched by title and will use the first" in caplog.text


def test_too_few_usable_items(tmp_path):
    path = write_sectioned_catalog(
        tmp_path / "games.csv", [("One", [("Gameplay", "x")]), ("Two", [("Plot", "no gameplay")])]
    )
    with pytest.raises(CatalogError, match=r"only 1 usable items; at least 2 are needed"):
        load_sectioned_catalog(path)
    assert len(load_sectioned_catalog(path, min_items=1)) == 1


def test_missing_file_columns_and_non_utf8_read_as_load_catalog_says(tmp_path):
    for loader in (load_sectioned_catalog, load_catalog):
        with pytest.raises(CatalogError, match=r"Catalog file not found: .*nope\.csv"):
            loader(tmp_path / "nope.csv")

    path = write_sectioned_catalog(tmp_path / "games.csv", [("A", "[]")], header=("name", "sections"))
    with pytest.raises(
        CatalogError, match=r"missing column\(s\) \['title'\]; the columns found are \['name', 'sections'\]"
    ):
        load_sectioned_catalog(path)

    path = tmp_path / "latin1.csv"
    path.write_bytes("title,sections\nok,[]\ncaf\xe9,[]\n".encode("latin-1"))
    messages = []
    for loader in (load_sectioned_catalog, load_catalog):
        with pytest.raises(CatalogError, match=r"line 3 is not valid UTF-8") as error:
            loader(path, **({} if loader is load_sectioned_catalog else {"id_column": None}))
        messages.append(str(error.value))
    assert messages[0] == messages[1]


def test_bad_section_names_are_rejected(tmp_path):
    path = write_sectioned_catalog(
        tmp_path / "games.csv", [("A", [("Gameplay", "x")]), ("B", [("Gameplay", "y")])]
    )
    with pytest.raises(CatalogError, match=r"a list of section titles, such as \['Gameplay'\]; got a string"):
        load_sectioned_catalog(path, sections="Gameplay")
    with pytest.raises(CatalogError, match="at least one section title"):
        load_sectioned_catalog(path, sections=())


def test_expert_annotations_resolve_on_a_catalog_that_contains_them(tmp_path):
    annotated = json.loads(VIDEO_GAMES_ANNOTATIONS.read_text(encoding="utf-8"))
    titles = list(
        dict.fromkeys([*annotated, *(title for similar in annotated.values() for title in similar)])
    )
    assert len(annotated) == 90 and len(titles) == 787
    unrelated = ["Unrelated Game 1", "Unrelated Game 2 & Friends", "Tetris, Again"]
    rows = [
        (html.unescape(title), [("Reception", "Liked."), ("Gameplay", f"How {title} plays.")])
        for title in unrelated[:2] + titles + unrelated[2:]
    ]
    path = write_sectioned_catalog(tmp_path / "video_games.txt", rows)

    catalog = load_sectioned_catalog(path)
    annotations = load_annotations(VIDEO_GAMES_ANNOTATIONS, catalog)

    assert len(catalog) == 787 + 3
    assert annotations.num_pairs == 800
    assert len(annotations.seeds) == 90
