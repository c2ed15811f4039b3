from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from metricbert_trainer.data.annotations import AnnotationError
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.data.graded_pools import is_pool_file, load_graded_pools

# Two facets of query "q1" and one of "q2"; "q1" judged among its own candidates is left out.
POOLS = [
    {"query_id": "q1", "facet": "method", "candidates": ["a", "b", "q1", "c"], "relevance": [3, 0, 2, 1]},
    {"query_id": "q1", "facet": "result", "candidates": ["b", "c"], "relevance": [2, 0]},
    {"query_id": "q2", "facet": "method", "candidates": ["a", "c", "a"], "relevance": [1, 2, 0]},
]


@pytest.fixture
def catalog(tmp_path):
    ids = ["a", "b", "c", "q1", "q2"]
    path = tmp_path / "papers.csv"
    pd.DataFrame({"id": ids, "title": [f"title {i}" for i in ids], "description": ids}).to_csv(
        path, index=False
    )
    return load_catalog(path)


def write_jsonl(path, pools):
    path.write_text("".join(json.dumps(pool) + "\n" for pool in pools), encoding="utf-8")
    return path


def write_qrels(path, pools):
    lines = [
        f"{pool['query_id']}#{pool['facet']} 0 {item} {grade}"
        for pool in pools
        for item, grade in zip(pool["candidates"], pool["relevance"], strict=True)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_jsonl_and_qrels_of_the_same_judgments_read_alike(catalog, tmp_path):
    read = [
        load_graded_pools(write_jsonl(tmp_path / "pools.jsonl", POOLS), catalog),
        load_graded_pools(write_qrels(tmp_path / "pools.qrels", POOLS), catalog),
    ]
    for pools in read:
        assert [(pool.query, pool.facet) for pool in pools.pools] == [
            (3, "method"),
            (3, "result"),
            (4, "method"),
        ]
        assert pools.queries == [3, 4] and pools.facets == ["method", "result"]
        # The query itself and a repeated candidate (the first grade kept) are left out, file order kept.
        np.testing.assert_array_equal(pools.pools[0].candidates, [0, 1, 2])
        np.testing.assert_array_equal(pools.pools[0].grades, [3, 0, 1])
        np.testing.assert_array_equal(pools.pools[2].candidates, [0, 2])
        np.testing.assert_array_equal(pools.pools[2].grades, [1, 2])
        assert pools.num_judgments == 7
    assert is_pool_file("x.JSONL") and is_pool_file("x.qrels") and not is_pool_file("x.csv")


def test_a_qrels_query_without_a_facet_names_the_item(catalog, tmp_path):
    path = tmp_path / "plain.qrels"
    path.write_text("q2 0 a 1\nq2 0 b 0\n", encoding="utf-8")
    (pool,) = load_graded_pools(path, catalog).pools
    assert (pool.query, pool.facet, pool.grades.tolist()) == (4, "", [1, 0])


def test_unmatched_ids_are_listed_or_dropped(catalog, tmp_path):
    path = write_jsonl(tmp_path / "pools.jsonl", [{**POOLS[0], "candidates": ["a", "zz", "q1", "c"]}])
    with pytest.raises(AnnotationError, match=r"1 ids match no item.*'zz' \(line 1\)"):
        load_graded_pools(path, catalog)
    (pool,) = load_graded_pools(path, catalog, on_unmatched="warn").pools
    assert pool.candidates.tolist() == [0, 2]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"query_id": "q1", "candidates": ["a"]}\n', "line 1: expected an object with query_id"),
        (
            '\n{"query_id": "q1", "candidates": ["a"], "relevance": [1, 2]}\n',
            "line 2: candidates and relevance",
        ),
        ('{"query_id": "q1", "candidates": ["a"], "relevance": [-1]}\n', "line 1: a grade is a whole number"),
        (
            '{"query_id": "q1", "candidates": ["a"], "relevance": [1.5]}\n',
            "line 1: a grade is a whole number",
        ),
        ('{"query_id": "q1", "candidates": ["a"]', "line 1: not valid JSON"),
    ],
)
def test_malformed_pool_lines_are_named(catalog, tmp_path, text, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(AnnotationError, match=message):
        load_graded_pools(path, catalog)


def test_a_qrels_line_of_other_than_four_fields_is_named(catalog, tmp_path):
    path = tmp_path / "bad.qrels"
    path.write_text("q1 0 a 1\nq1 a 1\n", encoding="utf-8")
    with pytest.raises(AnnotationError, match="line 2: a qrels line has 4 fields"):
        load_graded_pools(path, catalog)


def test_a_command_that_ranks_from_seeds_names_what_a_pool_file_is_for(catalog, tmp_path):
    from metricbert_trainer.data.annotations import load_annotations

    path = write_jsonl(tmp_path / "pools.jsonl", POOLS)
    with pytest.raises(AnnotationError, match="ranked pool by pool by `metricbert evaluate`"):
        load_annotations(path, catalog)
