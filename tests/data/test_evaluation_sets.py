"""Held-out test seeds and masked-label views: the shared helpers, and the shipped files they build."""

from __future__ import annotations

import re
import subprocess
import sys

import pandas as pd
import pytest
from conftest import REPO_ROOT

from metricbert_trainer.data.evaluation_sets import (
    draw_annotations,
    mask_terms,
    similar_by_labels,
    term_pattern,
)

WINES = REPO_ROOT / "data" / "wines"
DEBIAN = REPO_ROOT / "data" / "debian"


def test_terms_are_masked_as_whole_words_longest_first_and_case_sensitive_only_where_asked():
    pattern = term_pattern(
        ["Napa", "Napa Valley", "US", "Pinot Noir", "Bordeaux-style Red Blend"], case_sensitive=["US"]
    )
    assert mask_terms("Acme 2014 Pinot Noir (Napa Valley)", pattern) == ("Acme 2014", 2)
    assert mask_terms("pinot  noir for us, from the US", pattern) == ("for us, from the", 2)
    assert mask_terms("A Bordeaux style red blend; Napanee stays", pattern) == ("A ; Napanee stays", 1)
    assert mask_terms("nothing here", pattern) == ("nothing here", 0)


def test_the_draw_leaves_out_excluded_seeds_and_repeats_itself():
    similar = {str(item): [str(other) for other in range(12) if other != item] for item in range(12)}
    titles = {key: f"item {key}" for key in similar}
    first = draw_annotations(similar, titles, seeds=5, per_seed=3, rng_seed=7, exclude={"0", "1", "2"})
    assert first.equals(
        draw_annotations(similar, titles, seeds=5, per_seed=3, rng_seed=7, exclude={"0", "1", "2"})
    )
    assert first.seed_id.nunique() == 5 and not set(first.seed_id) & {"0", "1", "2"}
    assert (first.groupby("seed_id").size() == 3).all()
    assert (first.seed_id != first.recommended_id).all()
    with pytest.raises(SystemExit, match="Only 9 items"):
        draw_annotations(similar, titles, seeds=10, per_seed=3, rng_seed=7, exclude={"0", "1", "2"})


def test_items_are_similar_by_shared_labels_and_jaccard_and_only_within_their_group():
    labels = {
        "a": frozenset({"x", "y"}),
        "b": frozenset({"x", "y", "z"}),
        "c": frozenset({"x", "y", "z", "w", "v"}),
        "d": frozenset({"x", "y"}),
    }
    assert similar_by_labels(labels, min_jaccard=0.5, min_shared=2) == {
        "a": ["b", "d"],
        "b": ["a", "c", "d"],
        "c": ["b"],
        "d": ["a", "b"],
    }
    groups = {"a": "games", "b": "games", "c": "games", "d": "science"}
    assert similar_by_labels(labels, 0.5, 2, group=groups)["a"] == ["b"]
    assert similar_by_labels(labels, 0.5, 3)["a"] == []


@pytest.mark.parametrize(
    ("folder", "outputs"),
    [
        (WINES, ["proxy-annotations-test-500-seeds.csv", "winemag-sample-5811-masked.csv"]),
        (DEBIAN, ["debtags-annotations-test-300-seeds.csv", "debian-packages-4000-masked.csv"]),
    ],
)
def test_the_build_scripts_write_the_shipped_files_byte_for_byte(folder, outputs, tmp_path):
    subprocess.run(
        [sys.executable, str(folder / "build_evaluation_sets.py"), "--output-dir", str(tmp_path)],
        check=True,
        capture_output=True,
    )
    for name in outputs:
        assert (tmp_path / name).read_bytes() == (folder / name).read_bytes(), name


def test_the_shared_drawer_redraws_the_debian_dev_seeds():
    """build_benchmark.py draws its dev seeds through the shared helper: with its seed 0 and no
    exclusion, the labelling rule on the shipped catalog gives the shipped dev file again."""
    sys.path.insert(0, str(DEBIAN))
    try:
        from build_evaluation_sets import label_similarity
    finally:
        sys.path.remove(str(DEBIAN))
    catalog = pd.read_csv(DEBIAN / "debian-packages-4000.csv", dtype=str, keep_default_na=False)
    similar, _ = label_similarity(catalog)
    redrawn = draw_annotations(
        similar, dict(zip(catalog.id, catalog.title, strict=True)), seeds=100, per_seed=10, rng_seed=0
    )
    assert redrawn.equals(
        pd.read_csv(DEBIAN / "debtags-annotations-100-seeds.csv", dtype=str, keep_default_na=False)
    )


def test_wine_test_seeds_follow_the_labelling_rule_and_are_not_dev_seeds():
    wines = pd.read_csv(WINES / "winemag-sample-5811.csv", dtype=str, keep_default_na=False).set_index("id")
    dev = pd.read_csv(WINES / "proxy-annotations-100-seeds.csv", dtype=str)
    test = pd.read_csv(WINES / "proxy-annotations-test-500-seeds.csv", dtype=str)
    assert test.seed_id.nunique() == 500 and not set(test.seed_id) & set(dev.seed_id)
    for seed, item in zip(test.seed_id, test.recommended_id, strict=True):
        a, b = wines.loc[seed], wines.loc[item]
        assert seed != item and a.variety == b.variety and a.country == b.country
        assert abs(int(a.points) - int(b.points)) <= 2
        if a.price and b.price:
            assert max(float(a.price), float(b.price)) <= 1.5 * min(float(a.price), float(b.price))


def test_no_wine_text_keeps_its_own_variety_or_place_names_in_the_masked_view():
    wines = pd.read_csv(WINES / "winemag-sample-5811.csv", dtype=str, keep_default_na=False)
    masked = pd.read_csv(WINES / "winemag-sample-5811-masked.csv", dtype=str, keep_default_na=False)
    assert list(masked.columns) == ["id", "title", "description"] and masked.id.equals(wines.id)
    label_columns = ("variety", "country", "province", "region_1", "region_2")
    leaks = 0
    for row, masked_row in zip(wines.itertuples(), masked.itertuples(), strict=True):
        for column in label_columns:
            name = getattr(row, column)
            if not name:
                continue
            flags = 0 if name == "US" else re.IGNORECASE
            word = re.compile(r"(?<!\w)" + re.escape(name) + r"(?!\w)", flags)
            leaks += bool(word.search(masked_row.title) or word.search(masked_row.description))
    assert leaks == 0
    assert (wines.title != masked.title).sum() > 5000  # nearly every title spelt a label string out
