"""Every item's recommendations: the same rows ``nearest`` gives each item, written whole in each format."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from metricbert_trainer.evaluation.hybrid import with_tfidf
from metricbert_trainer.evaluation.recommendations import (
    CHUNK_BYTES,
    COLUMNS,
    MAX_CHUNK,
    chunk_size,
    recommendation_chunks,
    write_recommendations,
)
from metricbert_trainer.evaluation.scorers import TfidfScorer
from metricbert_trainer.evaluation.shared_neighbours import SharedNeighbourScorer


def each_items_nearest(scorer, catalog, k) -> pd.DataFrame:
    """The long table asked item by item, as ``metricbert recommend --item`` asks."""
    tables = []
    for item in range(len(catalog)):
        found = scorer.nearest(catalog, [item], k)
        tables.append(
            pd.DataFrame(
                {
                    "id": catalog.ids[item],
                    "rank": np.arange(1, found.indices.shape[1] + 1),
                    "neighbour_id": [catalog.ids[index] for index in found.indices[0]],
                    "distance": found.distances[0],
                }
            )
        )
    return pd.concat(tables, ignore_index=True)


@pytest.mark.parametrize("ranking", ["encoder", "tfidf", "hybrid", "reranked"])
def test_every_items_rows_are_the_rows_nearest_gives_it_in_any_chunking(wines_80, tiny_encoder, ranking):
    scorer = {
        "encoder": tiny_encoder,
        "tfidf": TfidfScorer(),
        "hybrid": with_tfidf(tiny_encoder, 0.3),
        "reranked": SharedNeighbourScorer(with_tfidf(tiny_encoder, 0.3), 7, 0.5),
    }[ranking]
    expected = each_items_nearest(scorer, wines_80, 5)
    for chunk in (13, 80):
        table = pd.concat(recommendation_chunks(scorer, wines_80, 5, chunk=chunk), ignore_index=True)
        assert list(table.columns) == list(COLUMNS) and len(table) == 5 * len(wines_80)
        # The same neighbours; distances to float rounding (a model's products of 13 rows at once
        # and of one row round differently, which the fusion's standardisation carries on).
        pd.testing.assert_frame_equal(table, expected, check_dtype=False, rtol=0, atol=1e-4)


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl", ".parquet"])
def test_the_table_is_written_whole_and_reads_back(wines_80, tmp_path, suffix):
    scorer = TfidfScorer()
    path = tmp_path / f"recommendations{suffix}"
    assert write_recommendations(scorer, wines_80, 4, path, chunk=7) == 4 * len(wines_80)
    read = {
        ".csv": lambda: pd.read_csv(path, dtype={"id": str, "neighbour_id": str}),
        ".tsv": lambda: pd.read_csv(path, sep="\t", dtype={"id": str, "neighbour_id": str}),
        ".jsonl": lambda: pd.read_json(path, lines=True, dtype={"id": str, "neighbour_id": str}),
        ".parquet": lambda: pd.read_parquet(path),
    }[suffix]()
    expected = pd.concat(recommendation_chunks(scorer, wines_80, 4), ignore_index=True)
    pd.testing.assert_frame_equal(read, expected, check_dtype=False, atol=1e-6)
    assert list(tmp_path.iterdir()) == [path]


class FailingAfterOneChunk(TfidfScorer):
    """A scorer that fails on the second chunk, as a run stopped midway (Ctrl-C, memory) would."""

    def nearest_ranker(self, catalog, k):
        nearest, calls = super().nearest_ranker(catalog, k), []

        def fail_on_second(queries):
            calls.append(queries)
            if len(calls) == 2:
                raise KeyboardInterrupt
            return nearest(queries)

        return fail_on_second


def test_a_run_stopped_midway_leaves_no_file_and_an_earlier_table_intact(wines_80, tmp_path):
    path = tmp_path / "recommendations.csv"
    path.write_text("an earlier table\n")
    with pytest.raises(KeyboardInterrupt):
        write_recommendations(FailingAfterOneChunk(), wines_80, 4, path, chunk=10)
    assert path.read_text() == "an earlier table\n" and list(tmp_path.iterdir()) == [path]
    with pytest.raises(ValueError, match="unsupported recommendations format '.xlsx'"):
        write_recommendations(TfidfScorer(), wines_80, 4, tmp_path / "recommendations.xlsx")


def test_a_chunk_holds_a_bounded_share_of_distance_rows():
    for items in (5_000, 100_000, 1_000_000):
        assert 8 * items * chunk_size(items) <= CHUNK_BYTES < 8 * items * (chunk_size(items) + 1)
    assert chunk_size(10**10) == 1 and chunk_size(10) == MAX_CHUNK
