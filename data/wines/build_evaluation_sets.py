"""Builds the wine sample's held-out evaluation files: test seeds, and the masked-label view.

- ``proxy-annotations-test-500-seeds.csv``: 500 seeds drawn by the labelling rule of the 100 dev
  seeds (``proxy-annotations-100-seeds.csv``), none of them a dev seed, with 10 similar wines
  each. A wine is similar to a seed when it has the same variety and country, points within 2
  and, when both prices are known, a price within a factor of 1.5. Only wines the catalog loader
  keeps (a title and a description) are drawn.
- ``winemag-sample-5811-masked.csv``: the catalog's id, title and description with every
  label-bearing string removed from both texts: each variety, country, province, region_1 and
  region_2 name of the metadata, whichever wine it belongs to, as whole words, case-insensitive
  (``US`` case-sensitive), brackets left empty dropped. Scoring this file with the same
  annotations shows how much of a ranking rests on the label words themselves.

The metadata columns are read here, to draw labels and find the strings to mask, and nowhere
else. Deterministic: the same inputs and ``--rng-seed`` write the same files.

    python data/wines/build_evaluation_sets.py      # writes both files beside this script, prints counts
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from metricbert_trainer.data.evaluation_sets import (
    build_main,
    draw_annotations,
    mask_catalog,
    term_pattern,
    write_evaluation_sets,
)

HERE = Path(__file__).resolve().parent
CATALOG = HERE / "winemag-sample-5811.csv"
DEV_ANNOTATIONS = HERE / "proxy-annotations-100-seeds.csv"
TEXT_COLUMNS = ("title", "description")
LABEL_STRING_COLUMNS = ("variety", "country", "province", "region_1", "region_2")
CASE_SENSITIVE = ("US",)
TEST_SEEDS = 500
PER_SEED = 10
POINTS_WITHIN = 2
PRICE_FACTOR = 1.5


def similar_wines(wines: pd.DataFrame) -> dict[str, list[str]]:
    """Wine id -> ids of the wines similar to it under the proxy labelling rule."""
    usable = wines[(wines.title.str.strip() != "") & (wines.description.str.strip() != "")]
    ids = usable.id.to_numpy()
    variety, country = usable.variety.to_numpy(), usable.country.to_numpy()
    points = pd.to_numeric(usable.points, errors="coerce").to_numpy()
    price = pd.to_numeric(usable.price.replace("", np.nan), errors="coerce").to_numpy()
    similar = {}
    for i in range(len(usable)):
        if not variety[i] or not country[i]:
            similar[ids[i]] = []
            continue
        both_priced = ~np.isnan(price) & ~np.isnan(price[i])
        ratio = np.where(both_priced, np.fmax(price, price[i]) / np.fmin(price, price[i]), 1.0)
        match = (
            (variety == variety[i]) & (country == country[i]) & (np.abs(points - points[i]) <= POINTS_WITHIN)
        )
        match &= ~both_priced | (ratio <= PRICE_FACTOR)
        match[i] = False
        similar[ids[i]] = ids[match].tolist()
    return similar


def build(output_dir: Path, rng_seed: int) -> dict[str, object]:
    wines = pd.read_csv(CATALOG, dtype=str, keep_default_na=False)
    dev_seeds = set(pd.read_csv(DEV_ANNOTATIONS, dtype=str).seed_id)
    titles = dict(zip(wines.id, wines.title, strict=True))
    similar = similar_wines(wines)
    test = draw_annotations(
        similar, titles, seeds=TEST_SEEDS, per_seed=PER_SEED, rng_seed=rng_seed, exclude=dev_seeds
    )
    pattern = term_pattern(
        (value for column in LABEL_STRING_COLUMNS for value in wines[column]), case_sensitive=CASE_SENSITIVE
    )
    masked, mask_counts = mask_catalog(wines, pattern, TEXT_COLUMNS)
    counts = write_evaluation_sets(
        output_dir,
        (f"proxy-annotations-test-{TEST_SEEDS}-seeds.csv", test),
        (f"{CATALOG.stem}-masked.csv", masked),
        similar,
        dev_seeds,
    )
    return {**counts, **mask_counts}


if __name__ == "__main__":
    build_main(build, __doc__, HERE)
