"""Builds the Debian benchmark's held-out evaluation files from the shipped catalog: test seeds,
and the masked-label view.

- ``debtags-annotations-test-300-seeds.csv``: 300 seeds drawn by the labelling rule of the 100
  dev seeds (``build_benchmark.py``: same ``Section``, at least 2 shared informative debtags, a
  Jaccard of at least 0.5), none of them a dev seed, with 10 similar packages each.
- ``debian-packages-4000-masked.csv``: the catalog's id, title and description with every
  label-bearing string removed from both texts, where it appears literally: each ``Section``
  value and each value of an informative tag (``game::arcade`` gives "arcade",
  ``field::biology:bioinformatics`` gives "biology" and "bioinformatics"), as whole words,
  case-insensitive, a hyphen matching a space.

The label columns (``section``, ``tags``) are read here and in ``build_benchmark.py`` only. The
similarity map is the one ``build_benchmark.py`` computes, from the catalog's own columns, so no
archive download is needed; with ``--rng-seed 0`` and no exclusion it draws the dev file again
(``tests/data/test_evaluation_sets.py`` checks that).

    python data/debian/build_evaluation_sets.py     # writes both files beside this script, prints counts
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from build_benchmark import (
    ITEMS_PER_SEED,
    MAX_TAG_SHARE,
    MIN_JACCARD,
    MIN_SHARED_TAGS,
    Package,
    informative_tags,
    similar_items,
)

from metricbert_trainer.data.evaluation_sets import (
    build_main,
    draw_annotations,
    mask_catalog,
    term_pattern,
    write_evaluation_sets,
)

HERE = Path(__file__).resolve().parent
CATALOG = HERE / "debian-packages-4000.csv"
DEV_ANNOTATIONS = HERE / "debtags-annotations-100-seeds.csv"
TEXT_COLUMNS = ("title", "description")
TEST_SEEDS = 300


def catalog_packages(catalog: pd.DataFrame) -> list[Package]:
    """The catalog's rows as the build script's packages (the synopsis is the title after ``name: ``)."""
    return [
        Package(
            name=row.id,
            source=row.id,
            synopsis=row.title.removeprefix(f"{row.id}: "),
            description=row.description,
            section=row.section,
            tags=tuple(tag for tag in row.tags.split(", ") if tag),
        )
        for row in catalog.itertuples()
    ]


def label_similarity(catalog: pd.DataFrame) -> tuple[dict[str, list[str]], dict[str, frozenset[str]]]:
    """Package -> similar packages under the labelling rule, and each package's informative tags."""
    packages = catalog_packages(catalog)
    tags, _ = informative_tags(packages, MAX_TAG_SHARE)
    return similar_items(packages, tags, MIN_JACCARD, MIN_SHARED_TAGS), tags


def label_strings(catalog: pd.DataFrame, tags: dict[str, frozenset[str]]) -> set[str]:
    """Every section value and every informative tag's value parts."""
    values = set(catalog.section)
    for package_tags in tags.values():
        for tag in package_tags:
            values.update(part for part in tag.split("::", 1)[1].split(":") if part)
    return values


def build(output_dir: Path, rng_seed: int) -> dict[str, object]:
    catalog = pd.read_csv(CATALOG, dtype=str, keep_default_na=False)
    dev_seeds = set(pd.read_csv(DEV_ANNOTATIONS, dtype=str).seed_id)
    similar, tags = label_similarity(catalog)
    titles = dict(zip(catalog.id, catalog.title, strict=True))
    test = draw_annotations(
        similar, titles, seeds=TEST_SEEDS, per_seed=ITEMS_PER_SEED, rng_seed=rng_seed, exclude=dev_seeds
    )
    strings = label_strings(catalog, tags)
    masked, mask_counts = mask_catalog(catalog, term_pattern(strings), TEXT_COLUMNS)
    counts = write_evaluation_sets(
        output_dir,
        (f"debtags-annotations-test-{TEST_SEEDS}-seeds.csv", test),
        (f"{CATALOG.stem}-masked.csv", masked),
        similar,
        dev_seeds,
    )
    return {**counts, "label_strings": len(strings), **mask_counts}


if __name__ == "__main__":
    build_main(build, __doc__, HERE)
