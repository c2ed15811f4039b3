"""What the command tests share: a small real wine catalog and annotations in files."""

from __future__ import annotations

import pandas as pd
import pytest

SEEDS = {0: [4, 9, 20], 7: [8], 33: [1, 50]}


@pytest.fixture(scope="session")
def files(wines_csv, tmp_path_factory):
    """A 60-wine catalog (metadata columns included, as in the real file) and proxy-style annotations."""
    folder = tmp_path_factory.mktemp("cli-data")
    frame = pd.read_csv(wines_csv, dtype=str, nrows=60)
    frame.to_csv(folder / "wines.csv", index=False)
    rows = [
        {
            "seed_id": frame.id[seed],
            "seed_title": frame.title[seed],
            "recommended_id": frame.id[item],
            "recommended_title": frame.title[item],
        }
        for seed, items in SEEDS.items()
        for item in items
    ]
    pd.DataFrame(rows).to_csv(folder / "annotations.csv", index=False)
    return folder
