"""The PyPI projects benchmark (data/pypi): the README cleaning, the label rule, the filters, and
the shipped files they built."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import subprocess
import sys

import pandas as pd
import pytest
from conftest import REPO_ROOT

from metricbert_trainer.data.annotations import load_annotations
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.data.evaluation_sets import labels_similar

PYPI = REPO_ROOT / "data" / "pypi"


def folder_module(name: str, alias: str):
    """``data/pypi/<name>.py`` imported as ``alias``: the Debian folder has a ``build_benchmark``
    too, and its scripts import it by that name."""
    sys.path.insert(0, str(PYPI))  # build_benchmark imports readme_text from its folder
    try:
        spec = importlib.util.spec_from_file_location(alias, PYPI / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[alias] = module  # where dataclasses look their module up
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(PYPI))
    return module


builder = folder_module("build_benchmark", "pypi_build_benchmark")
readme_text = folder_module("readme_text", "pypi_readme_text").readme_text
CATALOG_NAME, DEV_NAME, TEST_NAME, MASKED_NAME = (
    builder.CATALOG_NAME,
    builder.DEV_NAME,
    builder.TEST_NAME,
    builder.MASKED_NAME,
)


MARKDOWN_README = """# tinyproj
[![Build](https://ci.example.org/badge.svg)](https://ci.example.org/tinyproj) ![PyPI](https://img.shields.io/pypi/v/x)

<p align="center"><img src="logo.png" alt="logo"></p>

**tinyproj** parses *weather station* logs into [pandas](https://pandas.pydata.org) frames.
See https://tinyproj.example.org for more.

## Installation

```bash
pip install tinyproj
```

## Features
- Reads `METAR` reports
- Exports to CSV

| column | meaning |
|---|---|
| wind | speed in knots |

```python
import tinyproj
tinyproj.read("log.txt")
```

## License
MIT, see [LICENSE](LICENSE).
"""

RST_README = """=========
rstproj
=========

.. image:: https://img.shields.io/pypi/v/rstproj.svg
        :target: https://pypi.python.org/pypi/rstproj

Tools for `bird song <https://birds.example.org>`_ analysis, built on :mod:`numpy`.

Usage
-----

Run it like this::

    rstproj analyse song.wav

and read the spectrogram. |badge|

Contributing
------------

Pull requests welcome.
"""


def test_a_markdown_readme_keeps_its_prose_and_loses_code_markup_badges_and_packaging_sections():
    assert readme_text(MARKDOWN_README, 300) == (
        "tinyproj parses weather station logs into pandas frames. See for more. Reads METAR reports "
        "Exports to CSV column meaning wind speed in knots"
    )


def test_an_rst_readme_loses_directives_literal_blocks_substitutions_and_its_contributing_section():
    assert readme_text(RST_README, 300) == (
        "Tools for bird song analysis, built on numpy. Run it like this. and read the spectrogram."
    )


def test_the_prose_is_cut_at_the_word_limit():
    assert readme_text("one two three four five", 3) == "one two three"
    assert readme_text("```\ncode only\n```", 3) == ""


def test_labels_are_the_stated_topics_and_frameworks_without_versions():
    classifiers = (
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
        "Framework :: Django :: 4.2",
        "Framework :: Odoo :: 16.0",
        "License :: OSI Approved :: MIT License",
        "Programming Language :: Python :: 3",
    )
    assert builder.stated_labels(classifiers) == {
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
        "Framework :: Django",
        "Framework :: Odoo",
    }


def test_a_label_too_many_projects_imply_is_not_informative_even_where_it_is_stated():
    classifiers = {
        "a": ("Topic :: Software Development :: Testing", "Framework :: Pytest"),
        "b": ("Topic :: Software Development", "Topic :: Games/Entertainment"),
        "c": ("Topic :: Software Development :: Build Tools",),
        "d": ("Topic :: Games/Entertainment :: Puzzle Games",),
    }
    labels, common = builder.informative_labels(classifiers, max_share=0.5)
    assert common == {"Topic :: Software Development"}
    assert labels == {
        "a": {"Topic :: Software Development :: Testing", "Framework :: Pytest"},
        "b": {"Topic :: Games/Entertainment"},
        "c": {"Topic :: Software Development :: Build Tools"},
        "d": {"Topic :: Games/Entertainment :: Puzzle Games"},
    }


def record(
    name: str, description: str, classifiers=("Topic :: Games/Entertainment",), summary="A project"
) -> dict:
    return {
        "index_name": name,
        "name": name.title(),
        "version": "1.0",
        "summary": summary,
        "description": description,
        "classifiers": list(classifiers),
    }


def test_the_filters_remove_and_count_projects_without_labels_summary_prose_or_english_and_repeated_readmes():
    prose = " ".join(f"word{number}" for number in range(60))
    records = [
        record("kept", prose),
        record("no-labels", prose, classifiers=("License :: OSI Approved :: MIT License",)),
        record("no-summary", "other " + prose, summary=""),
        record("short", "too short to describe anything"),
        record("not-english", " ".join(["这是一个用于处理数据的库"] * 60)),
        record("kept-too", "Different opening entirely. " + prose),
        record("same-family", prose.upper()),
    ]
    items, removed = builder.select_items(records, size=10, seed=0)
    assert [item.name for item in items] == ["kept", "kept-too"]
    assert items[0].title == "Kept: A project"
    assert list(removed.values()) == [1, 1, 1, 1, 1, 0]


def test_a_draw_keeps_the_catalog_size_and_sorts_by_name():
    records = [record(f"p{number:02d}", f"project {number} " + "text " * 50) for number in range(20)]
    items, removed = builder.select_items(records, size=5, seed=0)
    assert len(items) == 5 and [item.name for item in items] == sorted(item.name for item in items)
    assert removed["not among the 5 drawn"] == 15
    assert [item.name for item in builder.select_items(records, size=5, seed=0)[0]] == [
        item.name for item in items
    ]


def shipped(name: str) -> pd.DataFrame:
    return pd.read_csv(PYPI / name, dtype=str, keep_default_na=False)


def test_the_build_script_rebuilds_the_shipped_annotations_and_masked_view_byte_for_byte(tmp_path):
    subprocess.run(
        [sys.executable, str(PYPI / "build_benchmark.py"), "--from-catalog", "--output-dir", str(tmp_path)],
        check=True,
        capture_output=True,
    )
    for name in (DEV_NAME, TEST_NAME, MASKED_NAME):
        assert (tmp_path / name).read_bytes() == (PYPI / name).read_bytes(), name


def test_every_annotated_pair_follows_the_label_rule_and_no_test_seed_is_a_dev_seed():
    catalog = shipped(CATALOG_NAME)
    labels, _ = builder.informative_labels(builder.catalog_classifiers(catalog), builder.MAX_LABEL_SHARE)
    dev, test = shipped(DEV_NAME), shipped(TEST_NAME)
    assert dev.seed_id.nunique() == 100 and test.seed_id.nunique() == 300
    assert not set(dev.seed_id) & set(test.seed_id)
    for pairs in (dev, test):
        assert (pairs.groupby("seed_id").size() == 10).all()
        for seed, item in zip(pairs.seed_id, pairs.recommended_id, strict=True):
            assert seed != item and labels_similar(
                labels[seed], labels[item], builder.MIN_JACCARD, builder.MIN_SHARED_LABELS
            )


@pytest.mark.parametrize("split", [DEV_NAME, TEST_NAME])
def test_the_catalog_and_its_masked_view_load_and_every_annotation_resolves(split):
    for view in (CATALOG_NAME, MASKED_NAME):
        catalog = load_catalog(str(PYPI / view))
        assert len(catalog) == len(shipped(CATALOG_NAME))
        assert len(load_annotations(str(PYPI / split), catalog).seeds) == (100 if split == DEV_NAME else 300)


def test_no_masked_text_keeps_a_label_string():
    catalog, masked = shipped(CATALOG_NAME), shipped(MASKED_NAME)
    assert list(masked.columns) == ["id", "title", "description"] and masked.id.equals(catalog.id)
    labels, _ = builder.informative_labels(builder.catalog_classifiers(catalog), builder.MAX_LABEL_SHARE)
    strings = builder.label_strings(labels)
    words = re.compile(
        r"(?<!\w)(?:" + "|".join(r"[\s-]+".join(map(re.escape, s.split())) for s in strings) + r")(?!\w)",
        re.IGNORECASE,
    )
    assert not any(words.search(text) for text in [*masked.title, *masked.description])
    assert (catalog.description != masked.description).sum() > 0.2 * len(catalog)


def test_the_manifest_holds_the_shipped_files_checksums_and_counts():
    manifest = json.loads((PYPI / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["outputs"] == {
        name: hashlib.sha256((PYPI / name).read_bytes()).hexdigest()
        for name in (CATALOG_NAME, MASKED_NAME, DEV_NAME, TEST_NAME)
    }
    assert manifest["counts"]["items"] == len(shipped(CATALOG_NAME))
    assert manifest["labels"]["dev"]["pairs"] == len(shipped(DEV_NAME))
