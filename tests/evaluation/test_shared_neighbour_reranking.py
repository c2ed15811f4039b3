"""Shared-neighbour re-ranking: the lists, the overlaps, the re-ranked rows and what they change."""

from __future__ import annotations

import gc
import logging

import numpy as np
import pandas as pd
import pytest
from scipy import sparse
from sklearn.preprocessing import normalize

from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.evaluation import candidate_lists
from metricbert_trainer.evaluation.candidate_lists import (
    candidate_neighbour_lists,
    candidate_pools,
    faiss_candidate_pools,
    prepared_parts,
    stacked_unit_views,
    unit_rows_of,
)
from metricbert_trainer.evaluation.hybrid import with_tfidf
from metricbert_trainer.evaluation.neighbours import (
    flat_storage,
    index_storage_rows,
    is_unit_scaled,
    unit_view,
)
from metricbert_trainer.evaluation.ranking_rows import standardised_rows
from metricbert_trainer.evaluation.scorers import TfidfScorer
from metricbert_trainer.evaluation.shared_neighbours import (
    PROBE_TOLERANCE,
    SharedNeighbourScorer,
    is_lists_cache,
    membership,
    neighbour_lists,
    overlap_rows,
)


def nearest_by_sorting(rows: np.ndarray, neighbours: int) -> np.ndarray:
    """Each item's nearest other items, from its whole row: the item itself left out, ties in catalog order."""
    rows = rows.copy()
    np.fill_diagonal(rows, np.inf)
    return np.argsort(rows, axis=1, kind="stable")[:, :neighbours]


def test_the_lists_hold_each_items_nearest_other_items_nearest_first_in_any_chunking(wines_80):
    scorer = TfidfScorer()
    expected = nearest_by_sorting(scorer.distance_rows(wines_80, range(len(wines_80))), 7)
    for chunk in (13, 80, 512):
        assert np.array_equal(neighbour_lists(scorer.row_ranker(wines_80), len(wines_80), 7, chunk), expected)


def test_fewer_neighbours_are_the_head_of_longer_lists(wines_80, tiny_encoder):
    """studies/ranking_defaults.py lists the largest count once and takes heads."""
    rank = with_tfidf(tiny_encoder).row_ranker(wines_80)
    longest = neighbour_lists(rank, len(wines_80), 20)
    for count in (1, 5, 10):
        assert np.array_equal(neighbour_lists(rank, len(wines_80), count), longest[:, :count])


def test_the_overlaps_are_the_jaccard_indices_of_each_item_with_its_neighbours():
    lists = np.array([[1, 2], [0, 2], [3, 4], [2, 4], [3, 2]])
    sets = [{item, *row} for item, row in enumerate(lists)]
    expected = [[len(sets[q] & sets[c]) / len(sets[q] | sets[c]) for c in range(5)] for q in (0, 2)]
    assert np.allclose(overlap_rows(membership(lists), [0, 2]), expected)
    assert np.allclose(overlap_rows(membership(lists), [0, 2])[:, [0, 2]], [[1.0, 0.2], [0.2, 1.0]])


def test_the_reranked_rows_fuse_the_base_rows_with_the_overlaps_each_standardised(wines_80, tiny_encoder):
    hybrid = with_tfidf(tiny_encoder)
    seeds = [0, 3, 17]
    reranked = SharedNeighbourScorer(hybrid, neighbours=10, weight=0.4, chunk=32).distance_rows(
        wines_80, seeds
    )
    everything = hybrid.distance_rows(wines_80, range(len(wines_80)))
    sets = [{item, *row} for item, row in enumerate(nearest_by_sorting(everything, 10))]
    jaccard = np.array([[len(sets[q] & s) / len(sets[q] | s) for s in sets] for q in seeds])
    expected = 0.6 * standardised_rows(everything[seeds], seeds) + 0.4 * standardised_rows(-jaccard, seeds)
    assert np.allclose(reranked, expected, atol=1e-4)


def test_an_item_that_shares_no_word_with_the_query_but_its_neighbourhood_rises_above_one_that_does_not():
    """ "alpha beta" and "gamma delta" share no word, but the same four items bridge them; "omega
    psi" shares no word with the query either, and comes first in the catalog. TF-IDF cannot tell
    the two apart and keeps catalog order; the shared neighbours put the bridged item first."""
    texts = ["alpha beta", "omega psi", "gamma delta", "alpha gamma", "beta delta", "alpha delta"]
    texts += ["beta gamma", "omega chi", "psi phi", "omega phi", "psi chi"]
    catalog = load_catalog(pd.DataFrame({"id": range(len(texts)), "title": texts, "description": texts}))
    query, bridged, unrelated = 0, 2, 1
    base = TfidfScorer().distance_rows(catalog, [query])[0]
    assert base[bridged] == base[unrelated]
    reranked = SharedNeighbourScorer(TfidfScorer(), neighbours=4, weight=0.5).distance_rows(catalog, [query])[
        0
    ]
    assert reranked[bridged] < reranked[unrelated]
    order = [item for item in np.argsort(reranked, kind="stable") if item != query]
    assert order.index(bridged) < order.index(unrelated)


def test_the_catalog_is_encoded_once_however_many_chunks_the_lists_take(wines_80, tiny_encoder):
    """Exact lists in chunks, or lists searched among candidates: one encoding serves the lists
    and the ranking."""
    forwards = []
    hook = tiny_encoder.model.register_forward_hook(lambda *_: forwards.append(1))
    try:
        tiny_encoder.distance_rows(wines_80, [0])
        once = len(forwards)
        for candidates in (0, 30):
            forwards.clear()
            scorer = SharedNeighbourScorer(
                with_tfidf(tiny_encoder), neighbours=5, weight=0.5, chunk=8, candidates=candidates
            )
            scorer.distance_rows(wines_80, [0])
            assert len(forwards) == once, candidates
    finally:
        hook.remove()
    assert once > 0


def test_a_catalog_too_small_for_the_lists_is_ranked_by_the_base_alone_with_a_warning(wines_80, caplog):
    texts = {"title": ["red fruit", "fruit oak", "oak red"], "description": ["red", "fruit", "oak"]}
    small = load_catalog(pd.DataFrame({"id": ["a", "b", "c"], **texts}))
    scorer = SharedNeighbourScorer(TfidfScorer(), neighbours=2, weight=0.5)
    with caplog.at_level(logging.WARNING, logger="metricbert_trainer.evaluation.shared_neighbours"):
        rows = scorer.distance_rows(small, [0, 1])
    assert np.array_equal(rows, TfidfScorer().distance_rows(small, [0, 1]))
    assert "3 items are too few for 2 shared neighbours" in caplog.text


@pytest.mark.parametrize(
    ("neighbours", "weight", "message"),
    [(0, 0.5, "at least 1"), (5, 0.0, r"\(0, 1\]"), (5, 1.5, r"\(0, 1\]")],
)
def test_settings_that_would_not_rerank_are_refused(neighbours, weight, message):
    with pytest.raises(ValueError, match=message):
        SharedNeighbourScorer(TfidfScorer(), neighbours=neighbours, weight=weight)


def test_kept_lists_are_read_back_for_the_same_ranking_and_listed_again_for_another(
    wines_80, tmp_path, caplog
):
    cache = tmp_path / "lists.npz"
    rows = [0, 3, 41]

    def rerank(scorer, catalog=wines_80) -> np.ndarray:
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="metricbert_trainer.evaluation.shared_neighbours"):
            return SharedNeighbourScorer(scorer, 5, 0.5, lists_cache=cache).distance_rows(catalog, rows)

    first = rerank(TfidfScorer())
    assert "listing the 5 nearest" in caplog.text and is_lists_cache(cache)
    assert np.array_equal(rerank(TfidfScorer()), first) and "reusing the lists" in caplog.text
    # Another ranking of the same catalog, or the same ranking of an edited catalog: listed again.
    unweighted = rerank(TfidfScorer(sublinear_tf=False))
    assert "listing the 5 nearest" in caplog.text
    assert np.array_equal(
        unweighted,
        SharedNeighbourScorer(TfidfScorer(sublinear_tf=False), 5, 0.5).distance_rows(wines_80, rows),
    )
    frame = wines_80.dataset.to_pandas()
    frame.loc[60, "description"] = "A different wine altogether."
    rerank(TfidfScorer(), load_catalog(frame))
    assert "listing the 5 nearest" in caplog.text


def test_kept_lists_survive_float_rounding_of_the_ranking_but_not_another_search(
    wines_80, tiny_encoder, tmp_path, caplog
):
    """The cache recognises its base ranking by distances compared within PROBE_TOLERANCE: a
    ranking that differs by float rounding (vectors scaled by another routine) reads the lists back, one
    that differs by more lists again; so does another FAISS index or search setting, and a cache
    without the probe."""
    cache = tmp_path / "lists.npz"
    hybrid = with_tfidf(tiny_encoder, 0.3)

    def listed(**search) -> str:
        caplog.clear()
        scorer = SharedNeighbourScorer(hybrid, 5, 0.5, lists_cache=cache, candidates=30, **search)
        with caplog.at_level(logging.INFO, logger="metricbert_trainer.evaluation.shared_neighbours"):
            scorer.searched_lists(hybrid.row_ranker(wines_80), wines_80)
        return "reusing" if "reusing the lists" in caplog.text else caplog.text

    flat = {"candidate_backend": "faiss", "faiss_index": "Flat", "faiss_parameters": ""}
    assert "listing the 5 nearest" in listed(**flat) and listed(**flat) == "reusing"
    with np.load(cache) as stored:
        kept = dict(stored)
    for shift, outcome in ((PROBE_TOLERANCE / 10, "reusing"), (PROBE_TOLERANCE * 10, "another base ranking")):
        np.savez(cache, **{**kept, "probe": kept["probe"] + shift})
        assert outcome in listed(**flat)
    np.savez(cache, **kept)
    assert "another catalog, count or search" in listed(**{**flat, "faiss_index": "HNSW8"})
    np.savez(cache, **kept)
    assert "another catalog, count or search" in listed(**{**flat, "candidate_backend": "exact"})
    del kept["probe"]
    np.savez(cache, **kept)  # the earlier layout, under this fingerprint: unreadable, listed again
    assert "Cannot read the shared-neighbour lists cache" in listed(**flat) and is_lists_cache(cache)


def test_lists_searched_among_every_item_are_the_exact_lists(wines_80, tiny_encoder):
    """With every other item a candidate and in the spread's sample, the candidate lists equal the
    exact ones; with fewer candidates they hold most of them."""
    hybrid = with_tfidf(tiny_encoder, 0.3)
    exact = neighbour_lists(hybrid.row_ranker(wines_80), len(wines_80), 7)
    assert np.array_equal(candidate_neighbour_lists(hybrid, wines_80, 7, 79, sample=80), exact)
    searched = candidate_neighbour_lists(hybrid, wines_80, 7, 30)
    recall = np.mean([len(set(a) & set(b)) for a, b in zip(searched, exact, strict=True)]) / 7
    assert 0.8 < recall < 1.0


def test_the_scorer_searches_among_candidates_and_keeps_such_lists_apart(
    wines_80, tiny_encoder, tmp_path, caplog
):
    hybrid = with_tfidf(tiny_encoder, 0.3)
    cache = tmp_path / "lists.npz"
    with caplog.at_level(logging.INFO, logger="metricbert_trainer.evaluation.shared_neighbours"):
        exact = SharedNeighbourScorer(hybrid, 7, 0.5, lists_cache=cache).distance_rows(wines_80, [0, 5])
        caplog.clear()
        searched = SharedNeighbourScorer(hybrid, 7, 0.5, lists_cache=cache, candidates=30)
        rows = searched.distance_rows(wines_80, [0, 5])
    assert "among its 30 nearest under the encoder" in caplog.text  # the exact lists were not reused
    assert rows.shape == exact.shape and not np.array_equal(rows, exact)
    with pytest.raises(ValueError, match="must be 0 \\(every item\\) or at least neighbours"):
        SharedNeighbourScorer(hybrid, 7, 0.5, candidates=5)
    with pytest.raises(ValueError, match="need vector scorers"):
        candidate_neighbour_lists(SharedNeighbourScorer(hybrid, 7, 0.5), wines_80, 7, 30)


def test_a_faiss_search_of_every_item_gives_the_exact_lists(wines_80, tiny_encoder):
    """The chunked FAISS path (one index of the stacked unit views, searched a chunk at a time)
    re-scores the same candidates as the exact path when every other item is one."""
    hybrid = with_tfidf(tiny_encoder, 0.3)
    exact = neighbour_lists(hybrid.row_ranker(wines_80), len(wines_80), 7)
    searched = candidate_neighbour_lists(
        hybrid, wines_80, 7, 79, sample=80, backend="faiss", faiss_index="Flat", faiss_parameters=""
    )
    assert np.array_equal(searched, exact)


def test_faiss_candidate_pools_leave_each_item_out_across_chunks():
    rng = np.random.default_rng(0)
    views = {"title": rng.standard_normal((50, 8)), "description": rng.standard_normal((50, 8))}
    stacked, slices = stacked_unit_views(views)
    assert np.allclose(np.linalg.norm(slices[1], axis=1), 1.0) and np.shares_memory(slices[0], stacked)
    summed_cosine = stacked @ stacked.T
    np.fill_diagonal(summed_cosine, -np.inf)
    seen = []
    for rows, pool in faiss_candidate_pools(candidate_lists.indexed_views(views, "Flat", ""), 10, chunk=7):
        assert pool.shape == (len(rows), 10) and not (pool == rows[:, None]).any()
        expected = np.argsort(-summed_cosine[rows], axis=1, kind="stable")[:, :10]
        assert all(set(a) == set(b) for a, b in zip(pool, expected, strict=True))
        seen += list(rows)
    assert seen == list(range(50))
    with pytest.raises(ValueError, match="NaN"):  # sklearn's normalize refuses it
        stacked_unit_views({"title": np.full((3, 2), np.nan)})


def test_items_an_hnsw_graph_cannot_reach_beyond_their_copies_get_exact_candidates(caplog):
    """A catalog of about a hundred copies of each of 30 items, in drawn order: an HNSW graph can
    link the copies of an item among themselves, and a search from one then reaches too few items.
    It raised, and stopped a training run of 300,000 items drawn from the wine sample before its
    first step; now those items are compared with every item, with a warning."""
    # Seed 15 is one of the 40 first whose graph leaves items short (FAISS builds it alike on any
    # number of threads); the others leave none.
    rng = np.random.default_rng(15)
    source = rng.standard_normal((60, 16)).astype(np.float32)
    drawn = rng.integers(0, 30, 3000)
    indexed = candidate_lists.indexed_unit_rows(source, {"title": drawn, "description": drawn + 30})
    _, searched = indexed.index.search(indexed.stacked, 201)
    short = np.flatnonzero((searched < 0).any(axis=1))
    assert len(short) > 10  # the default HNSW32 graph leaves these items too few (102 of 3,000)
    with caplog.at_level(logging.WARNING, logger="metricbert_trainer.evaluation.candidate_lists"):
        pools = list(faiss_candidate_pools(indexed, 200))
    assert f"fewer than 200 candidates for {len(short)} of 3000 items" in caplog.text
    kept = np.concatenate([pool for _, pool in pools])
    assert kept.min() >= 0 and not (kept == np.arange(3000)[:, None]).any()
    assert all(len(set(pool)) == 200 for pool in kept)
    summed_cosine = indexed.stacked[short] @ indexed.stacked.T
    summed_cosine[np.arange(len(short)), short] = -np.inf
    nearest = -np.sort(-summed_cosine, axis=1)[:, :200]
    found = -np.sort(-np.take_along_axis(summed_cosine, kept[short], axis=1), axis=1)
    np.testing.assert_allclose(found, nearest, atol=1e-5)


def test_views_gathered_from_rows_of_one_matrix_are_the_stacked_unit_views_of_those_rows():
    """``unit_rows_of`` (training's teacher reading the guide's cache) gathers each view's rows into
    its column slice and scales it there: bit for bit what stacking the gathered views gives, with
    repeated rows, an order of its own per view, and views already of unit length kept as they are."""
    rng = np.random.default_rng(3)
    source = rng.standard_normal((30, 6)).astype(np.float32)
    source[20:] /= np.linalg.norm(source[20:], axis=1, keepdims=True)
    rows = {
        "title": rng.integers(0, 20, 45),
        "description": rng.integers(0, 30, 45),
        "unit": np.arange(20, 30),
    }
    rows["unit"] = np.resize(rows["unit"], 45)
    gathered = unit_rows_of(source, rows)
    stacked, slices = stacked_unit_views({name: source[picked] for name, picked in rows.items()})
    assert gathered.stacked.tobytes() == stacked.tobytes()
    assert list(gathered) == list(rows) and all(
        np.shares_memory(view, gathered.stacked) for view in gathered.values()
    )
    assert np.array_equal(gathered["unit"], source[rows["unit"]])  # already unit length: untouched
    assert stacked_unit_views(gathered)[0] is gathered.stacked  # a search reads it as it is
    with pytest.raises(IndexError, match="Rows must lie in 0..29"):  # never clipped to the last row
        unit_rows_of(source, {"title": np.array([0, 30])})


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_indexed_views_are_the_index_storage_holding_the_gathered_unit_rows(dtype):
    """``indexed_unit_rows`` (training's teacher) adds the gathered unit rows to a FAISS index a
    chunk at a time and returns views over the index's own storage: bit for bit ``unit_rows_of``'s,
    sharing the index's memory, and usable after every other reference to the index is gone. An
    index without a flat storage in item order (IVF) leaves the views apart from it."""
    import faiss

    rng = np.random.default_rng(5)
    source = rng.standard_normal((30, 6)).astype(dtype)
    rows = {"title": rng.integers(0, 30, 45), "description": rng.integers(0, 30, 45)}
    gathered = unit_rows_of(source, rows)
    indexed = candidate_lists.indexed_unit_rows(source, rows, "HNSW8", "efSearch=16", chunk_rows=7)
    assert indexed.stacked.tobytes() == gathered.stacked.tobytes() and list(indexed) == list(rows)
    storage = faiss.downcast_index(indexed.index.storage)
    held = faiss.rev_swig_ptr(storage.get_xb(), storage.ntotal * storage.d)
    assert storage.ntotal == 45 and all(np.shares_memory(view, held) for view in indexed.values())
    assert indexed.index_settings == ("HNSW8", "efSearch=16") and indexed.index.hnsw.efSearch == 16
    description = indexed["description"]
    del indexed, storage, held
    gc.collect()
    np.ones((200, 90), dtype=np.float32)  # memory freed by a lost index would be reused here
    assert np.array_equal(description, gathered["description"])
    apart = candidate_lists.indexed_unit_rows(source, rows, "IVF2,Flat", "nprobe=2")
    assert apart.index is None and apart.stacked.tobytes() == gathered.stacked.tobytes()


def test_views_gathered_from_a_float16_matrix_are_its_rows_cast_a_chunk_at_a_time(monkeypatch):
    """The guide's cache in float16 (``guide_embedding_cache_dtype``) is gathered into float32
    columns a chunk of rows at a time, never cast whole: the same views as the float32 copy's."""
    monkeypatch.setattr(candidate_lists, "CAST_ROWS", 7)  # 45 rows: seven chunks, the last short
    rng = np.random.default_rng(4)
    source = rng.standard_normal((30, 6)).astype(np.float16)
    rows = {"title": rng.integers(0, 30, 45), "description": rng.integers(0, 30, 45)}
    gathered = unit_rows_of(source, rows)
    assert gathered.stacked.dtype == np.float32
    assert gathered.stacked.tobytes() == unit_rows_of(source.astype(np.float32), rows).stacked.tobytes()
    with pytest.raises(IndexError, match="Rows must lie in 0..29"):
        unit_rows_of(source, {"title": np.array([0, 30])})


def test_lists_searched_among_candidates_keep_those_candidates_in_memory_and_cache(
    wines_80, tiny_encoder, tmp_path
):
    """The candidates a list was searched among are the search's pools, kept beside the lists in
    the cache (``recommend --all --candidates`` reuses them); a cache written before they were
    kept still serves its lists."""
    hybrid = with_tfidf(tiny_encoder, 0.3)
    parts = [(part.distance, weight, vectors) for part, weight, vectors in prepared_parts(hybrid, wines_80)]
    _, searches = candidate_pools(parts, 30, backend="exact")
    (_, expected), *_ = searches
    cache = tmp_path / "lists.npz"
    scorer = SharedNeighbourScorer(
        hybrid, 7, 0.5, lists_cache=cache, candidates=30, candidate_backend="exact"
    )
    ranker = hybrid.row_ranker(wines_80)
    computed = scorer.searched_lists(ranker, wines_80, pools=True)
    assert computed.pools.dtype == np.int32 and np.array_equal(computed.pools, expected)
    with np.load(cache) as stored:
        assert sorted(stored.files) == ["fingerprint", "lists", "pools", "probe"] and is_lists_cache(cache)
        fingerprint, lists, probe = stored["fingerprint"], stored["lists"], stored["probe"]
    assert np.array_equal(lists, computed.lists)
    read = scorer.searched_lists(ranker, wines_80, pools=True)
    assert np.array_equal(read.lists, lists) and np.array_equal(read.pools, expected)
    assert scorer.searched_lists(ranker, wines_80).pools is None  # read only when asked
    np.savez(cache, fingerprint=fingerprint, probe=probe, lists=lists)  # as written before pools were kept
    older = scorer.searched_lists(ranker, wines_80, pools=True)
    assert np.array_equal(older.lists, lists) and older.pools is None
    assert SharedNeighbourScorer(hybrid, 7, 0.5).searched_lists(ranker, wines_80, pools=True).pools is None
    # Fewer candidates are the first of those searched: what searching fewer finds.
    (_, fewer), *_ = candidate_pools(parts, 20, backend="exact")[1]
    (rows, reused), *_ = candidate_pools(parts, 20, searched=expected[40:], items=np.arange(40, 80))[1]
    assert np.array_equal(rows, np.arange(40, 80)) and np.array_equal(reused, fewer[40:])
    with pytest.raises(ValueError, match="must hold at least 31 for each of 80 items"):
        candidate_pools(parts, 31, searched=expected)


def test_the_prepared_parts_hold_one_unit_copy_of_the_vectors_which_nothing_copies_again(
    wines_80, tiny_encoder
):
    """Each part's views are kept at unit length, the values of scaling the raw vectors; scaling
    them again (``candidate_pools``, the FAISS matrix) returns the same arrays, the same bits."""
    hybrid = with_tfidf(tiny_encoder, 0.3)
    prepared = prepared_parts(hybrid, wines_80)
    for part, _, unit in prepared:
        raw_views = part.item_vectors(wines_80)
        # Ranked from the unit copy (column slices, read in place) as from the raw vectors.
        np.testing.assert_allclose(part.ranker(unit)([0, 7]), part.ranker(raw_views)([0, 7]), atol=1e-6)
        for name, raw in raw_views.items():
            scaled = unit[name]
            if sparse.issparse(raw):
                assert (scaled != normalize(sparse.csr_matrix(raw, dtype=np.float32))).nnz == 0
            else:
                assert np.array_equal(scaled, normalize(raw.astype(np.float32)))
            assert unit_view(scaled) is scaled
    parts = [(part.distance, weight, vectors) for part, weight, vectors in prepared]
    views, _ = candidate_pools(parts, 30, backend="exact")
    assert all(
        view is kept
        for part_views, (_, _, vectors) in zip(views, prepared, strict=True)
        for view, kept in zip(part_views, vectors.values(), strict=True)
    )
    encoder = prepared[0][2]  # dense: its views are the column slices of the matrix FAISS searches
    stacked, slices = stacked_unit_views(encoder)
    assert stacked is encoder.stacked and all(np.shares_memory(view, stacked) for view in slices)
    assert np.array_equal(stacked, np.concatenate(list(encoder.values()), axis=1))


def test_prepared_views_searched_through_an_hnsw_index_become_its_storage(wines_80, tiny_encoder):
    """A FAISS search of the prepared parts (``evaluate``, ``recommend``) gives the encoder's unit
    views the index: their views become column slices of its flat storage, their own matrix goes,
    the floats stay, and a second search with the same settings reuses the index. The lists are
    those of a search from views that were never prepared. IVF keeps no flat storage: the views
    keep their matrix and get the index all the same."""
    hybrid = with_tfidf(tiny_encoder, 0.3)
    prepared = prepared_parts(hybrid, wines_80)
    encoder = prepared[0][2]
    matrix, kept = encoder.stacked, {name: view.copy() for name, view in encoder.items()}
    search = {"backend": "faiss", "faiss_index": "HNSW8", "faiss_parameters": "efSearch=64"}
    lists = candidate_neighbour_lists(hybrid, wines_80, 7, 30, prepared=prepared, **search)
    storage = index_storage_rows(encoder.index, flat_storage(encoder.index))
    assert encoder.index_settings == ("HNSW8", "efSearch=64") and not np.shares_memory(
        encoder.stacked, matrix
    )
    assert all(np.shares_memory(view, storage) for view in [encoder.stacked, *encoder.values()])
    assert all(np.array_equal(encoder[name], view) for name, view in kept.items())
    index = encoder.index
    again = candidate_neighbour_lists(hybrid, wines_80, 7, 30, prepared=prepared, **search)
    assert encoder.index is index and np.array_equal(again, lists)
    assert np.array_equal(candidate_neighbour_lists(hybrid, wines_80, 7, 30, **search), lists)
    ivf = prepared_parts(hybrid, wines_80)[0][2]
    matrix = ivf.stacked
    assert candidate_lists.indexed_views(ivf, "IVF2,Flat", "nprobe=2") is ivf
    assert ivf.stacked is matrix and ivf.index.nprobe == 2 and ivf.index.ntotal == len(wines_80)


def test_only_float32_rows_of_length_one_or_zero_are_taken_as_scaled():
    unit = normalize(np.random.default_rng(0).standard_normal((6, 4))).astype(np.float32)
    unit[2] = 0.0  # scaling leaves a zero row as it is
    assert unit_view(unit) is unit and is_unit_scaled(unit)
    assert not is_unit_scaled(unit[:, :3]) and not is_unit_scaled(unit.astype(np.float64))
    last_longer = unit.copy()
    last_longer[-1] *= 1.01  # the first row alone does not decide
    assert not is_unit_scaled(last_longer)
    as_float64 = unit_view(unit.astype(np.float64))  # converted, and scaled as the raw vectors are
    assert as_float64.dtype == np.float32 and np.array_equal(as_float64, normalize(unit))
    longer = unit * 1.01
    assert np.allclose(np.linalg.norm(unit_view(longer)[[0, 1, 3]], axis=1), 1.0)
    tfidf = sparse.csr_matrix(unit)
    assert unit_view(tfidf) is tfidf and unit_view(tfidf.tocoo()).format == "csr"
    with pytest.raises(ValueError, match="NaN"):
        unit_view(np.full((3, 2), np.nan, dtype=np.float32))
