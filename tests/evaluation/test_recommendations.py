"""Every item's recommendations: the same rows ``nearest`` gives each item, written whole in each
format; searched among candidates, the exact ones wherever the pool holds them."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from datasets import Dataset

from metricbert_trainer.evaluation import recommendations
from metricbert_trainer.evaluation.candidate_recommendations import (
    candidate_nearest_chunks,
    pool_overlaps,
    repeated_in_row,
)
from metricbert_trainer.evaluation.hybrid import with_tfidf
from metricbert_trainer.evaluation.recommendations import (
    CHUNK_BYTES,
    COLUMNS,
    MAX_CHUNK,
    chunk_size,
    join_tables,
    recommendation_chunks,
    shard_items,
    write_recommendations,
)
from metricbert_trainer.evaluation.scorers import TfidfScorer
from metricbert_trainer.evaluation.shared_neighbours import SharedNeighbourScorer, membership, overlap_rows


def each_items_nearest(scorer, catalog, k, items) -> pd.DataFrame:
    """The long table of ``items``, asked item by item, as ``metricbert recommend --item`` asks."""
    tables = []
    for item in items:
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
    # Asked one by one, the items at both ends of each chunk of 13 (a chunk's rows written from
    # the wrong offset, or one row short, shows there) and one inside each: 19 of the 80, each
    # query encoding the catalog anew.
    items = len(wines_80)
    asked = sorted(
        {row for start in range(0, items, 13) for row in (start, start + 6, start + 12) if row < items}
    )
    expected = each_items_nearest(scorer, wines_80, 5, asked)
    for chunk in (13, 80):
        table = pd.concat(recommendation_chunks(scorer, wines_80, 5, chunk=chunk), ignore_index=True)
        assert list(table.columns) == list(COLUMNS) and len(table) == 5 * len(wines_80)
        assert list(table.id) == [wines_80.ids[item] for item in range(items) for _ in range(5)]
        # The same neighbours; distances to float rounding (a model's products of 13 rows at once
        # and of one row round differently, which the fusion's standardisation carries on).
        rows = table[table.id.isin({wines_80.ids[item] for item in asked})].reset_index(drop=True)
        pd.testing.assert_frame_equal(rows, expected, check_dtype=False, rtol=0, atol=1e-4)


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
    if suffix == ".parquet":  # the 12 chunks gathered into one row group
        assert pq.ParquetFile(path).num_row_groups == 1


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl", ".parquet"])
def test_parts_joined_are_the_table_one_call_writes(wines_80, tmp_path, suffix):
    """The parts of a launch's processes (``cli/launched_table``), joined in order: the file one
    call over every item writes, byte for byte in the text formats (one header), row for row in
    Parquet; the join is written whole, with the mode a table gets."""
    scorer = TfidfScorer()
    whole = tmp_path / f"whole{suffix}"
    write_recommendations(scorer, wines_80, 4, whole, chunk=7)
    parts = [tmp_path / f"part-{index}{suffix}" for index in range(3)]
    for index, part in enumerate(parts):
        write_recommendations(scorer, wines_80, 4, part, chunk=7, items=shard_items(80, 3, index))
    joined = join_tables(parts, tmp_path / f"joined{suffix}")
    if suffix == ".parquet":
        pd.testing.assert_frame_equal(pd.read_parquet(joined), pd.read_parquet(whole))
        assert pq.ParquetFile(joined).num_row_groups == 3  # a part's group stays a group
    else:
        assert joined.read_bytes() == whole.read_bytes()
    assert joined.stat().st_mode == whole.stat().st_mode
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        [whole.name, joined.name, *(part.name for part in parts)]
    )


def test_parquet_row_groups_hold_many_chunks_up_to_their_size(wines_80, tmp_path, monkeypatch):
    monkeypatch.setattr(recommendations, "ROW_GROUP_ROWS", 50)
    path = tmp_path / "recommendations.parquet"
    write_recommendations(TfidfScorer(), wines_80, 4, path, chunk=7)  # 12 chunks of 28 rows or fewer
    written = pq.ParquetFile(path)
    sizes = [written.metadata.row_group(group).num_rows for group in range(written.num_row_groups)]
    assert sum(sizes) == 320 and max(sizes) == 50 and len(sizes) < 12


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


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_run_stopped_midway_leaves_no_file_and_an_earlier_table_intact(wines_80, tmp_path, suffix):
    path = tmp_path / f"recommendations{suffix}"
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


def ranking_of(name: str, encoder):
    hybrid = with_tfidf(encoder, 0.3)
    return {
        "tfidf": TfidfScorer(),
        "reranked tfidf": SharedNeighbourScorer(TfidfScorer(), 7, 0.5),
        "hybrid": hybrid,
        "reranked": SharedNeighbourScorer(hybrid, 7, 0.5),
    }[name]


@pytest.mark.parametrize("ranking", ["tfidf", "reranked tfidf", "hybrid", "reranked"])
def test_searched_among_every_item_the_recommendations_are_the_exact_ones(wines_80, tiny_encoder, ranking):
    """With every other item a candidate and in the spread's sample, the pooled scoring (the
    fusion's parts, the re-ranking's overlaps and their standardisations) is the exact ranking's."""
    scorer = ranking_of(ranking, tiny_encoder)
    exact = scorer.nearest(wines_80, range(80), 5)
    backend = (
        {"backend": "exact"} if ranking.endswith("tfidf") else {"faiss_index": "Flat", "faiss_parameters": ""}
    )
    seen = []
    for rows, found in candidate_nearest_chunks(scorer, wines_80, 5, 79, sample=80, chunk=13, **backend):
        assert np.array_equal(found.indices, exact.indices[rows])
        np.testing.assert_allclose(found.distances, exact.distances[rows], rtol=0, atol=1e-4)
        seen += list(rows)
    assert sorted(seen) == list(range(80))


def test_searched_among_fewer_candidates_most_recommendations_are_the_exact_ones(wines_80, tiny_encoder):
    scorer = ranking_of("reranked", tiny_encoder)
    exact = scorer.nearest(wines_80, range(80), 5).indices
    found = {}
    for rows, top in candidate_nearest_chunks(
        scorer, wines_80, 5, 20, faiss_index="Flat", faiss_parameters=""
    ):
        assert (np.diff(top.distances, axis=1) >= 0).all() and not (top.indices == rows[:, None]).any()
        assert all(len(set(row)) == 5 for row in top.indices)  # an item listed in its pool twice is kept once
        found.update(zip(rows, top.indices, strict=True))
    recall = np.mean([len(set(found[item]) & set(exact[item])) for item in range(80)]) / 5
    assert 0.8 < recall < 1.0
    with pytest.raises(ValueError, match="k \\(5\\) <= candidates \\(4\\)"):
        next(candidate_nearest_chunks(scorer, wines_80, 5, 4))


def test_as_many_candidates_as_other_items_compare_every_pair(wines_80):
    scorer = SharedNeighbourScorer(TfidfScorer(), 7, 0.5)
    exact = pd.concat(recommendation_chunks(scorer, wines_80, 5), ignore_index=True)
    for candidates in (79, 200):
        table = pd.concat(
            recommendation_chunks(scorer, wines_80, 5, candidates=candidates), ignore_index=True
        )
        pd.testing.assert_frame_equal(table, exact)


def test_pooled_overlaps_and_their_moments_are_the_whole_rows():
    lists = np.array([[1, 2], [0, 2], [0, 1], [4, 0], [3, 1]])
    members = membership(lists)
    rows, pool = np.array([0, 3]), np.array([[2, 4, 1], [0, 4, 2]])
    whole = overlap_rows(members, rows)
    pooled, mean, spread = pool_overlaps(members, members.T.tocsr(), rows, pool)
    np.testing.assert_allclose(pooled, np.take_along_axis(whole, pool, axis=1), rtol=1e-6)
    others = np.array([[1, 2, 3, 4], [0, 1, 2, 4]])
    np.testing.assert_allclose(mean[:, 0], np.take_along_axis(whole, others, axis=1).mean(axis=1), rtol=1e-6)
    np.testing.assert_allclose(spread[:, 0], np.take_along_axis(whole, others, axis=1).std(axis=1), rtol=1e-6)


def test_only_an_items_later_repeats_in_its_pool_are_marked():
    pool = np.array([[4, 1, 4, 2, 1], [0, 1, 2, 3, 5]])
    assert repeated_in_row(pool).tolist() == [[False, False, True, False, True], [False] * 5]


@pytest.mark.parametrize("count", [1, 7, 80, 81])
def test_shards_are_contiguous_ranges_as_datasets_cuts_them(count):
    whole = Dataset.from_dict({"item": list(range(count))})
    for num_shards in {1, 2, 3, 7} & set(range(1, count + 1)):
        shards = [shard_items(count, num_shards, index) for index in range(num_shards)]
        assert np.array_equal(np.concatenate(shards), np.arange(count))
        for index, items in enumerate(shards):
            assert list(items) == whole.shard(num_shards, index, contiguous=True)["item"]
    with pytest.raises(ValueError, match="shard index \\(2\\) < number of shards \\(2\\)"):
        shard_items(count, 2, 2)
    with pytest.raises(ValueError, match=f"{count + 1} shards of {count} items would leave some empty"):
        shard_items(count, count + 1, 0)


def test_shards_concatenated_are_the_whole_table(wines_80, tiny_encoder):
    """Each shard's rows are ranked against the whole catalog (its index, lists and sampled
    spreads), so its rows are the whole table's rows for its items, exact or among candidates."""
    scorer = ranking_of("reranked", tiny_encoder)
    whole = pd.concat(recommendation_chunks(scorer, wines_80, 5), ignore_index=True)
    flat = {"faiss_index": "Flat", "faiss_parameters": ""}
    among = list(candidate_nearest_chunks(scorer, wines_80, 5, 20, chunk=13, **flat))
    for num_shards in (2, 3):
        shards = [shard_items(80, num_shards, index) for index in range(num_shards)]
        table = pd.concat(
            [table for items in shards for table in recommendation_chunks(scorer, wines_80, 5, items=items)],
            ignore_index=True,
        )
        pd.testing.assert_frame_equal(table, whole, check_exact=False, rtol=0, atol=1e-6)
        sharded = [
            found
            for items in shards
            for found in candidate_nearest_chunks(scorer, wines_80, 5, 20, chunk=13, items=items, **flat)
        ]
        assert np.array_equal(np.concatenate([rows for rows, _ in sharded]), np.arange(80))
        assert np.array_equal(
            np.concatenate([found.indices for _, found in sharded]),
            np.concatenate([found.indices for _, found in among]),
        )
        # To float rounding: a chunk's products with the sampled items round with its other rows.
        np.testing.assert_allclose(
            np.concatenate([found.distances for _, found in sharded]),
            np.concatenate([found.distances for _, found in among]),
            rtol=0,
            atol=1e-5,
        )


def test_the_candidates_the_lists_were_searched_among_serve_as_the_pools(
    wines_80, tiny_encoder, tmp_path, caplog
):
    """Lists searched among 30 candidates keep them; a table among 20 takes their first 20 instead
    of searching again, and ranks as the table that searches them (the lists read back from a cache
    written before the candidates were kept); a table among more than 30, or another search, searches."""
    cache = tmp_path / "lists.npz"
    hybrid = with_tfidf(tiny_encoder, 0.3)
    reranked = SharedNeighbourScorer(
        hybrid, 7, 0.5, lists_cache=cache, candidates=30, candidate_backend="exact"
    )

    def table(candidates, **search):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="metricbert_trainer.evaluation.candidate_recommendations"):
            found = list(candidate_nearest_chunks(reranked, wines_80, 5, candidates, chunk=13, **search))
        return np.concatenate([top.indices for _, top in found]), np.concatenate(
            [top.distances for _, top in found]
        )

    reused = table(20, backend="exact")
    assert "the first 20 of the 30 each shared-neighbour list was searched among" in caplog.text
    shard = table(20, backend="exact", items=np.arange(40, 80))  # keeps its own rows of the candidates
    assert "the first 20 of the 30" in caplog.text and np.array_equal(shard[0], reused[0][40:])
    with np.load(cache) as stored:
        fingerprint, probe, lists = stored["fingerprint"], stored["probe"], stored["lists"]
    np.savez(
        cache, fingerprint=fingerprint, probe=probe, lists=lists
    )  # the same lists, without their candidates
    searched = table(20, backend="exact")
    assert "searched among" not in caplog.text
    assert np.array_equal(reused[0], searched[0]) and np.array_equal(reused[1], searched[1])
    cache.unlink()
    table(20, backend="faiss", faiss_index="Flat", faiss_parameters="")  # another search: its own
    assert "searched among" not in caplog.text
    table(40, backend="exact")  # more candidates than the lists were searched among
    assert "searched among" not in caplog.text
