"""The Debian packages benchmark: the shipped files load and resolve, and the build script parses,
cleans, filters and labels a tiny hand-written archive as intended."""

from __future__ import annotations

import importlib.util
import json
import sys

import pandas as pd
import pytest
from conftest import REPO_ROOT

from metricbert_trainer.data.annotations import load_annotations
from metricbert_trainer.data.catalog import load_catalog

DEBIAN = REPO_ROOT / "data" / "debian"
CATALOG = DEBIAN / "debian-packages-4000.csv"
ANNOTATIONS = DEBIAN / "debtags-annotations-100-seeds.csv"


def _load_script():
    """The build script is a data/ script, not part of the package: import it by path."""
    spec = importlib.util.spec_from_file_location("debian_build_benchmark", DEBIAN / "build_benchmark.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


build = _load_script()

# 16 words, repeated to pass the 40-word minimum.
FILLER = " It is free software, packaged for Debian, with a manual page and examples for users.\n" * 3

PACKAGES = """\
Package: foo
Version: 1.0-1
Description: arcade game with robots
Description-md5: m-foo
Tag: game::arcade, interface::x11, role::program,
 use::gameplaying
Section: games

Package: foo-gtk
Source: foo (1.0-1)
Description: arcade game with robots (GTK front end)
Description-md5: m-foo-gtk
Tag: game::arcade, use::gameplaying, uitoolkit::gtk
Section: games

Package: qux
Description: arcade shooter in space
Description-md5: m-qux
Tag: game::arcade, use::gameplaying, implemented-in::c
Section: games

Package: zap
Description: arcade shooter in space, again
Description-md5: m-zap
Tag: game::arcade, use::gameplaying
Section: games

Package: bar
Description: transitional package for foo
Description-md5: m-bar
Tag: role::dummy
Section: oldlibs

Package: libbaz-dev
Source: baz
Description: development files for baz
Description-md5: m-libbaz-dev
Tag: devel::library, role::devel-lib
Section: libdevel

Package: libbaz1
Source: baz
Description: shared library for baz
Description-md5: m-libbaz1
Tag: devel::library, role::shared-lib
Section: libs

Package: tiny
Description: small tool
Description-md5: m-tiny
Tag: game::arcade, use::gameplaying
Section: games

Package: untagged
Description: a package debtags never saw
Description-md5: m-untagged
Section: utils
"""

TRANSLATION = f"""\
Package: foo
Description-md5: m-foo
Description-en: arcade game with robots
 Foo is a game
 where robots chase you.
 .
   Verbatim  line.
{FILLER}
Package: foo-gtk
Description-md5: m-foo-gtk
Description-en: arcade game with robots (GTK front end)
 Foo is a game where robots chase you, with a longer GTK text so that it
 would win if the source name did not.
{FILLER}{FILLER}
Package: qux
Description-md5: m-qux
Description-en: arcade shooter in space
 Qux shoots asteroids.
{FILLER}
Package: zap
Description-md5: m-zap
Description-en: arcade shooter in space, again
 Qux shoots asteroids.
{FILLER}
Package: bar
Description-md5: m-bar
Description-en: transitional package for foo
 This is a transitional package; it can be removed.
{FILLER}
Package: libbaz-dev
Description-md5: m-libbaz-dev
Description-en: development files for baz
 This package contains the development files of baz.
{FILLER}
Package: libbaz1
Description-md5: m-libbaz1
Description-en: shared library for baz
 This package contains the shared library of baz.
{FILLER}
Package: tiny
Description-md5: m-tiny
Description-en: small tool
 Too short.

Package: untagged
Description-md5: m-untagged
Description-en: a package debtags never saw
 Never seen.
{FILLER}"""


@pytest.fixture(scope="module")
def items():
    return build.select_items(build.join_packages(PACKAGES, TRANSLATION), size=10)


def test_shipped_files_load_and_every_annotation_resolves():
    catalog = load_catalog(CATALOG, strict=True)
    annotations = load_annotations(ANNOTATIONS, catalog)
    assert len(catalog) == 4000 and len(set(catalog.ids)) == len(catalog)
    assert len(annotations.seeds) == 100 and annotations.num_pairs == 1000
    assert all(len(items) == 10 for items in annotations.similar.values())
    raw = pd.read_csv(ANNOTATIONS, dtype=str)
    assert list(raw.columns) == ["seed_id", "seed_title", "recommended_id", "recommended_title"]
    assert not (raw["seed_id"] == raw["recommended_id"]).any()
    assert "\r" not in CATALOG.read_text(encoding="utf-8")


def test_the_manifests_label_statistics_are_those_the_shipped_files_give():
    """The labels of manifest.json recomputed from the shipped catalog (its label-only section and
    tags columns) and dev annotations, as the build computes them: catches a manifest that drifted
    from the files, and tie orders that changed with string hashing (ties by name)."""
    manifest = json.loads((DEBIAN / "manifest.json").read_text(encoding="utf-8"))
    frame = pd.read_csv(CATALOG, dtype=str, keep_default_na=False)
    packages = [
        build.Package(row.id, row.id, row.title, row.description, row.section, tuple(row.tags.split(", ")))
        for row in frame.itertuples()
    ]
    settings = manifest["settings"]
    tags, common = build.informative_tags(packages, settings["max_tag_share"])
    similar = build.similar_items(packages, tags, settings["min_jaccard"], settings["min_shared_tags"])
    annotations = pd.read_csv(ANNOTATIONS, dtype=str)
    statistics = build.label_statistics(packages, similar, tags, 10, annotations)
    assert sorted(common) == manifest["tags_over_max_share"]
    assert json.loads(json.dumps(statistics)) == manifest["labels"]
    tied = [name for name, count in statistics["top_shared_tags"] if count == 110]
    assert tied == sorted(tied) and len(tied) == 4


def test_clean_long_description_joins_lines_and_paragraphs_with_spaces():
    text = "synopsis\n First line\n second\tline.\r\n .\n   indented  verbatim\n .\n Last."
    assert build.clean_long_description(text) == "First line second line. indented verbatim Last."


def test_join_reads_tags_sources_and_skips_untagged_packages():
    packages = {package.name: package for package in build.join_packages(PACKAGES, TRANSLATION)}
    assert "untagged" not in packages
    foo = packages["foo"]
    assert foo.title == "foo: arcade game with robots"
    assert foo.description.startswith("Foo is a game where robots chase you. Verbatim line. It is free")
    assert foo.tags == ("game::arcade", "interface::x11", "role::program", "use::gameplaying")
    assert (packages["foo-gtk"].source, packages["libbaz1"].source, foo.source) == ("foo", "baz", "foo")


def test_filters_keep_one_binary_per_source_and_one_copy_of_a_text(items):
    kept, removed = items
    assert [package.name for package in kept] == ["foo", "qux"]
    assert removed["transitional or dummy package"] == 1  # bar
    assert removed["name ends with -dev"] == 1  # libbaz-dev
    assert sum(count for name, count in removed.items() if name.startswith("lib*")) == 1  # libbaz1
    assert removed[f"long description under {build.MIN_WORDS} words"] == 1  # tiny
    assert removed["not the chosen binary of its source package"] == 1  # foo-gtk, though longer
    assert removed["duplicate long description"] == 1  # zap, a copy of qux


def test_labels_use_section_and_informative_tags_only(items):
    kept, _ = items
    tags, common = build.informative_tags(kept, max_share=1.0)
    assert tags == {"foo": {"game::arcade", "use::gameplaying"}, "qux": {"game::arcade", "use::gameplaying"}}
    assert common == frozenset()
    assert build.similar_items(kept, tags, min_jaccard=0.5, min_shared=2) == {"foo": ["qux"], "qux": ["foo"]}
    assert build.similar_items(kept, tags, min_jaccard=0.5, min_shared=3) == {"foo": [], "qux": []}
    _, common = build.informative_tags(kept, max_share=0.5)  # both tags on 2 of 2 items
    assert common == {"game::arcade", "use::gameplaying"}


def test_annotations_draw_seeds_with_enough_similar_items_in_the_wine_layout():
    similar = {"a": ["b", "c"], "b": ["a"], "c": ["a"]}
    titles = {name: f"{name}: title" for name in similar}
    frame = build.draw_annotations(similar, titles, rng_seed=0, seeds=1, per_seed=2)
    assert list(frame.columns) == ["seed_id", "seed_title", "recommended_id", "recommended_title"]
    assert set(frame["seed_id"]) == {"a"} and sorted(frame["recommended_id"]) == ["b", "c"]
    assert frame.equals(build.draw_annotations(similar, titles, rng_seed=0, seeds=1, per_seed=2))
