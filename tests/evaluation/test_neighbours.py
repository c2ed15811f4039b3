from __future__ import annotations

import gc
import logging

import numpy as np
import pandas as pd
import pytest
from scipy import sparse

from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.evaluation import neighbours
from metricbert_trainer.evaluation.neighbours import (
    catalog_views,
    distance_ranker,
    distance_rows,
    exact_searcher,
    mode_label,
    nearest_in_rows,
    top_k,
)


def brute_force_distances(vectors: dict[str, np.ndarray], distance: str) -> np.ndarray:
    """The plain full-matrix computation the chunked code must reproduce."""
    total = 0.0
    for matrix in vectors.values():
        matrix = np.asarray(matrix, dtype=np.float64)
        if distance == "euclidean":
            total = total + np.linalg.norm(matrix[:, None, :] - matrix[None, :, :], axis=-1)
            continue
        unit = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
        cosine = np.clip(unit @ unit.T, -1.0, 1.0)
        total = total + (np.arccos(cosine) / np.pi if distance == "angular" else 1.0 - cosine)
    return total


def brute_force_top_k(vectors: dict[str, np.ndarray], distance: str, k: int) -> tuple[np.ndarray, np.ndarray]:
    full = brute_force_distances(vectors, distance)
    np.fill_diagonal(full, np.inf)
    order = np.argsort(full, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(full, order, axis=1)


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks and slices of a few rows, so that the tests go through many of them."""
    monkeypatch.setattr(neighbours, "BLOCK_BYTES", 4 * 300 * 7)
    monkeypatch.setattr(neighbours, "SLICE_BYTES", 4 * 300 * 3)


def random_views(
    num_items: int = 300, seed: int = 0, dims: tuple[int, ...] = (24, 16)
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        f"view{index}": rng.normal(size=(num_items, dim)).astype(np.float32) for index, dim in enumerate(dims)
    }


@pytest.mark.parametrize(
    ("distance", "dims"),
    [
        ("angular", (24,)),  # ranked on the cosine, arccos on the k kept only
        ("angular", (24, 16)),  # Metric_Inf: a sum of angles
        ("cosine", (24, 16)),
        ("euclidean", (24, 16)),
    ],
)
def test_chunked_top_k_equals_brute_force(small_blocks, distance, dims):
    vectors = random_views(dims=dims)
    result = top_k(vectors, distance, k=15)
    expected_indices, expected_distances = brute_force_top_k(vectors, distance, 15)
    np.testing.assert_array_equal(result.indices, expected_indices)
    np.testing.assert_allclose(result.distances, expected_distances, atol=2e-5)
    assert result.indices.dtype == np.int64 and result.distances.dtype == np.float32


def test_an_item_is_never_its_own_neighbour_even_beside_a_duplicate(small_blocks):
    vectors = random_views(num_items=50)
    for matrix in vectors.values():
        matrix[7] = matrix[3]  # items 3 and 7 are identical
    result = top_k(vectors, "angular", k=49)
    assert not (result.indices == np.arange(50)[:, None]).any()
    assert result.indices[3, 0] == 7 and result.indices[7, 0] == 3
    assert sorted(result.indices[0].tolist()) == list(range(1, 50))


def test_queries_k_cap_and_distance_rows(small_blocks):
    vectors = random_views(num_items=40)
    everyone = top_k(vectors, "angular", k=5)
    some = top_k(vectors, "angular", k=5, queries=[9, 2, 30])
    np.testing.assert_array_equal(some.indices, everyone.indices[[9, 2, 30]])
    assert top_k(vectors, "angular", k=500).indices.shape == (40, 39)
    assert top_k(vectors, "angular", k=5, queries=[]).indices.shape == (0, 5)
    rows, expected = (
        distance_rows(vectors, "angular", [4, 0]),
        brute_force_distances(vectors, "angular")[[4, 0]],
    )
    rows[[0, 1], [4, 0]] = expected[[0, 1], [4, 0]] = 0.0  # an item's own distance is clamped to ~1e-3, not 0
    np.testing.assert_allclose(rows, expected, atol=2e-5)


@pytest.mark.parametrize("distance", ["angular", "euclidean"])
def test_prepared_searches_answer_every_call_as_one_call_does_with_the_views_prepared_once(
    small_blocks, distance
):
    vectors = random_views(num_items=60)
    search, ranked = exact_searcher(vectors, distance, k=8), distance_ranker(vectors, distance)
    chunks = [[5, 0, 59], list(range(10, 30)), []]
    for chunk in chunks:
        once, each = search(chunk), top_k(vectors, distance, k=8, queries=chunk)
        np.testing.assert_array_equal(once.indices, each.indices)
        np.testing.assert_array_equal(once.distances, each.distances)
        np.testing.assert_array_equal(ranked(chunk), distance_rows(vectors, distance, chunk))
    np.testing.assert_array_equal(search(None).indices, top_k(vectors, distance, k=8).indices)
    with pytest.raises(ValueError, match="item indices"):
        search([60])


def test_a_prepared_search_scales_raw_views_once_when_it_is_made(small_blocks):
    vectors = random_views(num_items=60)
    search, ranked = exact_searcher(vectors, "angular", k=8), distance_ranker(vectors, "angular")
    before = search([1, 2]), ranked([1, 2])
    # What the caller's raw arrays become afterwards (here NaN, which a call that checked and
    # scaled them would refuse) does not reach the unit copies made once.
    for matrix in vectors.values():
        matrix[:] = np.nan
    np.testing.assert_array_equal(search([1, 2]).indices, before[0].indices)
    np.testing.assert_array_equal(ranked([1, 2]), before[1])


def test_sparse_views_rank_like_their_dense_copies(small_blocks):
    rng = np.random.default_rng(1)
    dense = {}
    for field in ("title", "description"):
        dense[field] = rng.random((60, 30)) * (rng.random((60, 30)) < 0.2)
        dense[field][:, 0] += 0.01  # no all-zero rows
    sparse_result = top_k(
        {field: sparse.csr_matrix(matrix) for field, matrix in dense.items()}, "cosine", k=8
    )
    dense_result = top_k(dense, "cosine", k=8)
    np.testing.assert_array_equal(sparse_result.indices, dense_result.indices)
    np.testing.assert_allclose(sparse_result.distances, dense_result.distances, atol=1e-5)


@pytest.mark.parametrize("distance", ["angular", "cosine", "euclidean"])
def test_strided_and_unit_scaled_views_rank_as_their_contiguous_raw_copies(distance):
    """Views are read in place when torch can (a column slice of views side by side, as
    ``candidate_lists.unit_vectors`` keeps them), copied when it cannot (a negative stride), and
    views already of unit length are not scaled again: every way ranks as the plain raw copy."""
    rng = np.random.default_rng(2)
    raw = rng.standard_normal((40, 12)).astype(np.float32)
    side_by_side = np.concatenate([raw, raw / np.linalg.norm(raw, axis=1, keepdims=True)], axis=1)
    expected = brute_force_distances({"t": raw}, distance)[[3, 9]]
    ways = {"column slice": side_by_side[:, :12]}
    if distance != "euclidean":
        ways["unit-scaled column slice"] = side_by_side[:, 12:]

    def others(rows: np.ndarray) -> np.ndarray:
        """The rows without each item's distance to itself (float32 rounds an angle near 0 up)."""
        rows = np.array(rows, dtype=np.float64)
        rows[[0, 1], [3, 9]] = 0.0
        return rows

    for way, view in ways.items():
        rows = distance_rows({"t": view}, distance, [3, 9])
        np.testing.assert_allclose(others(rows), others(expected), atol=1e-5, err_msg=way)
    reversed_rows = distance_rows({"t": raw[::-1]}, distance, [36, 30])  # items 3 and 9, a negative stride
    np.testing.assert_allclose(others(reversed_rows[:, ::-1]), others(expected), atol=1e-5)


def test_faiss_agrees_with_exact(small_blocks):
    pytest.importorskip("faiss")
    one_view = random_views(dims=(24,))
    exact = top_k(one_view, "angular", k=10)
    found = top_k(one_view, "angular", k=10, backend="faiss")
    np.testing.assert_array_equal(found.indices, exact.indices)
    np.testing.assert_allclose(found.distances, exact.distances, atol=1e-5)

    # Metric_Inf: the index orders by the summed cosine, the re-ranking by the summed angle.
    two_views = random_views(dims=(24, 16))
    exact = top_k(two_views, "angular", k=10)
    everything = top_k(two_views, "angular", k=10, backend="faiss", faiss_candidates=299)
    np.testing.assert_array_equal(everything.indices, exact.indices)
    np.testing.assert_allclose(everything.distances, exact.distances, atol=1e-5)
    default = top_k(two_views, "angular", k=10, backend="faiss")
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(default.indices, exact.indices, strict=True)])
    assert recall > 0.98
    approximate = top_k(two_views, "angular", k=10, backend="faiss", faiss_index="HNSW32")
    assert not (approximate.indices == np.arange(300)[:, None]).any()


@pytest.mark.parametrize("distance", ["angular", "cosine"])
def test_items_an_approximate_index_returns_too_few_for_are_ranked_exactly(small_blocks, caplog, distance):
    """An IVF index of 32 lists over 300 items, one list probed, returns fewer than k other items
    for the items of its smaller lists. The search raised for them; now exactly those are ranked as
    the exact backend ranks them, the others kept as the index found them, and a warning counts
    them. Angular over two views re-ranks by the summed angle, cosine takes the index's scores."""
    pytest.importorskip("faiss")
    views = random_views(dims=(24, 16))
    search = {"backend": "faiss", "faiss_index": "IVF32,Flat", "faiss_parameters": "nprobe=1"}
    index, _, rows = neighbours.unit_index(list(views.values()), "IVF32,Flat", "nprobe=1")
    short = np.flatnonzero((index.search(rows, 11)[1] < 0).any(axis=1))  # 11: the item itself too
    assert 50 < len(short) < 250
    exact = top_k(views, distance, k=10)
    with caplog.at_level(logging.WARNING, logger="metricbert_trainer.evaluation.neighbours"):
        found = top_k(views, distance, k=10, faiss_candidates=10, **search)
    assert f"fewer than k=10 neighbours for {len(short)} of 300 items" in caplog.text
    np.testing.assert_array_equal(found.indices[short], exact.indices[short])
    np.testing.assert_allclose(found.distances[short], exact.distances[short], atol=1e-6)
    kept = np.setdiff1d(np.arange(300), short)
    assert (found.indices[kept] != exact.indices[kept]).any()  # the index's own, approximate lists
    assert np.isfinite(found.distances).all() and not (found.indices == np.arange(300)[:, None]).any()
    some = top_k(views, distance, k=10, queries=[short[0], kept[0], short[-1]], faiss_candidates=10, **search)
    np.testing.assert_array_equal(some.indices, found.indices[[short[0], kept[0], short[-1]]])


def test_a_catalog_of_many_copies_is_ranked_through_an_hnsw_graph(caplog):
    """About a hundred copies of each of 30 items, in drawn order: an HNSW graph can link the
    copies of an item among themselves, and a search from one reaches too few items, however wide
    (the seed is candidate_lists' test's). top_k raised for them, which stopped the whole search;
    those items' lists now hold the exact backend's distances."""
    pytest.importorskip("faiss")
    rng = np.random.default_rng(15)
    source = rng.standard_normal((60, 16)).astype(np.float32)
    drawn = rng.integers(0, 30, 3000)
    views = {"title": source[drawn], "description": source[drawn + 30]}
    index, _, rows = neighbours.unit_index(list(views.values()), "HNSW32", "efSearch=256")
    short = np.flatnonzero((index.search(rows, 201)[1] < 0).any(axis=1))
    assert len(short) > 10  # the graph leaves these items too few (102 of 3,000)
    search = {"backend": "faiss", "faiss_index": "HNSW32", "faiss_parameters": "efSearch=256"}
    with caplog.at_level(logging.WARNING, logger="metricbert_trainer.evaluation.neighbours"):
        found = top_k(views, "cosine", k=200, **search)
    assert f"fewer than k=200 neighbours for {len(short)} of 3000 items" in caplog.text
    exact = top_k(views, "cosine", k=200)
    np.testing.assert_allclose(found.distances[short], exact.distances[short], atol=1e-5)
    assert all(len(set(row)) == 200 for row in found.indices)


def test_an_hnsw_index_given_no_search_width_explores_as_many_items_as_it_returns():
    """FAISS's HNSW explores ``efSearch`` items (16 by default) however many it returns: Metric_Inf's
    top 50 of 3,000 items, from 200 candidates, kept less than 0.95 of the exact lists' items at
    that default. Given no ``efSearch`` the search now explores the candidates it returns, and keeps them
    all here; a width the caller names is kept, and other indexes are left as they are."""
    pytest.importorskip("faiss")
    views = random_views(num_items=3000, dims=(32, 32))
    exact = top_k(views, "angular", k=50)

    def recall(parameters: str) -> float:
        found = top_k(
            views, "angular", k=50, backend="faiss", faiss_index="HNSW32", faiss_parameters=parameters
        )
        return np.mean([len(set(a) & set(b)) / 50 for a, b in zip(found.indices, exact.indices, strict=True)])

    assert recall("") > 0.99 and recall("efSearch=16") < 0.95
    matrix = np.ascontiguousarray(views["view0"])
    named = neighbours.inner_product_index(matrix, "HNSW32", "efSearch=24")
    neighbours.search_at_least(named, "efSearch=24", 201)
    assert named.hnsw.efSearch == 24
    unnamed = neighbours.inner_product_index(matrix, "HNSW32")
    neighbours.search_at_least(unnamed, "", 201)
    assert unnamed.hnsw.efSearch == 201
    neighbours.search_at_least(unnamed, "", 20)  # never narrowed
    assert unnamed.hnsw.efSearch == 201
    inverted = neighbours.inner_product_index(matrix, "IVF8,Flat", "nprobe=2")
    neighbours.search_at_least(inverted, "nprobe=2", 201)
    assert inverted.nprobe == 2


@pytest.mark.parametrize(
    ("factory", "parameters"), [("Flat", ""), ("HNSW8", "efSearch=16"), ("IVF4,Flat", "nprobe=2")]
)
def test_the_unit_index_is_the_scaled_views_index_and_holds_their_rows_once(factory, parameters):
    """``unit_index`` (the FAISS backend's index) searches as the index of the scaled views'
    matrix does, bit for bit, and its store holds that matrix's rows: the index's own storage
    when it has a flat one, which the rows then share, else a flat index beside it."""
    pytest.importorskip("faiss")
    raw = random_views(num_items=120, dims=(24, 16))
    raw["view1"] /= np.linalg.norm(raw["view1"], axis=1, keepdims=True)  # a view scaled already
    views = list(raw.values())
    matrix = np.hstack([np.asarray(view) for view in neighbours._scaled(views, neighbours.Distance.ANGULAR)])
    index, store, rows = neighbours.unit_index(views, factory, parameters)
    assert np.shares_memory(rows, neighbours.index_storage_rows(index, store))
    np.testing.assert_array_equal(rows, matrix)
    expected = neighbours.inner_product_index(matrix, factory, parameters).search(matrix[:30], 12)
    for found, wanted in zip(index.search(rows[:30], 12), expected, strict=True):
        np.testing.assert_array_equal(found, wanted)
    own = neighbours.flat_storage(index)
    if factory.startswith("IVF"):
        assert own is None
    else:
        assert np.shares_memory(rows, neighbours.index_storage_rows(index, own))
    del index, store, own  # the rows keep what owns their memory: the index, or the flat one beside IVF
    gc.collect()
    np.ones((120, 40), dtype=np.float32)  # memory freed under the rows would be reused here
    np.testing.assert_array_equal(rows, matrix)


def test_faiss_search_parameters_reach_the_index_and_an_ivf_index_must_name_its_probes(small_blocks):
    """Probing every list of an IVF index is exact, probing one misses neighbours; and since FAISS
    probes one unless told more, an IVF index whose parameters name no ``nprobe`` is refused, on
    every path that builds one, before it is trained."""
    pytest.importorskip("faiss")
    one_view = random_views(dims=(24,))
    exact = top_k(one_view, "angular", k=10)
    search = {"backend": "faiss", "faiss_index": "IVF4,Flat", "faiss_candidates": 40}
    every_list = top_k(one_view, "angular", k=10, faiss_parameters="nprobe=4", **search)
    np.testing.assert_array_equal(every_list.indices, exact.indices)
    one_list = top_k(one_view, "angular", k=10, faiss_parameters="nprobe=1", **search)
    assert (one_list.indices != exact.indices).any()
    refused = "'IVF4,Flat' is an inverted file: FAISS searches 1 of its 4 lists"
    with pytest.raises(ValueError, match=refused):
        top_k(one_view, "angular", k=10, **search)
    with pytest.raises(ValueError, match=refused):
        top_k(one_view, "angular", k=10, faiss_parameters="efSearch=64", **search)
    matrix = np.ascontiguousarray(one_view["view0"])
    with pytest.raises(ValueError, match=refused):
        neighbours.inner_product_index(matrix, "IVF4,Flat")
    with pytest.raises(ValueError, match="'OPQ4,IVF4,Flat' is an inverted file"):
        neighbours.unit_index([matrix], "OPQ4,IVF4,Flat")  # an IVF inside a chain of transforms too
    assert neighbours.empty_index(24, "HNSW8").ntotal == 0  # no probes to name


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nearest_in_rows_is_a_stable_argsorts_head_with_ties_infinities_and_nan(dtype):
    """Rows of few distinct values tie at every boundary (duplicate texts do); the result must be
    what a stable argsort of each row (its own entry made infinite) starts with."""
    rng = np.random.default_rng(0)
    for trial in range(200):
        items, count = int(rng.integers(3, 40)), int(rng.integers(1, 6))
        rows = rng.integers(0, 4, (count, items)).astype(dtype)
        if trial % 3 == 0:
            rows[rng.random(rows.shape) < 0.1] = np.nan
        if trial % 4 == 0:
            rows[rng.random(rows.shape) < 0.1] = np.inf
        queries = rng.integers(0, items, count)
        k = int(rng.integers(1, items + 2))  # beyond items - 1 too: capped
        expected = rows.copy()
        expected[np.arange(count), queries] = np.inf
        order = np.argsort(expected, axis=1, kind="stable")[:, : min(k, items - 1)]
        found = nearest_in_rows(rows.copy(), queries, k)
        assert np.array_equal(found.indices, order)
        assert np.array_equal(found.distances, np.take_along_axis(expected, order, axis=1), equal_nan=True)
    with pytest.raises(ValueError, match="at least two items"):
        nearest_in_rows(np.zeros((1, 1)), [0], 3)


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="same items"):
        top_k({"a": np.ones((5, 3)), "b": np.ones((6, 3))}, "angular")
    for distance in ("angular", "cosine", "euclidean"):
        for bad in (np.nan, np.inf, -np.inf):
            vectors = np.ones((5, 3), dtype=np.float32)
            vectors[3, 1] = bad  # one value among finite ones
            with pytest.raises(ValueError, match="NaN or infinite"):
                top_k({"a": np.ones((5, 3)), "b": vectors}, distance)
        # Finite values at the edge of float32 are not taken for infinite ones.
        huge = np.full((5, 3), np.finfo(np.float32).max, dtype=np.float32)
        huge[0] *= -1
        assert distance_rows({"a": huge}, distance, [0]).shape == (1, 5)
    with pytest.raises(ValueError, match="backend"):
        top_k(random_views(num_items=5), "angular", backend="annoy")
    with pytest.raises(ValueError, match="item indices"):
        distance_rows(random_views(num_items=5), "angular", [5])


def test_catalog_views():
    frame = pd.DataFrame({"id": ["a", "b"], "title": ["Red", "White"], "description": ["Bold.", "Crisp."]})
    catalog = load_catalog(frame)
    assert catalog_views(catalog, "metric_inf") == {
        "title": ["Red", "White"],
        "description": ["Bold.", "Crisp."],
    }
    assert catalog_views(catalog, "concat") == {"concat": ["Red Bold.", "White Crisp."]}
    assert catalog_views(catalog, "title") == {"title": ["Red", "White"]}
    with pytest.raises(ValueError, match="catalog field"):
        catalog_views(catalog, "variety")
    assert [mode_label(mode) for mode in ("concat", "metric_inf", "title")] == ["Mean", "Metric_Inf", "title"]
