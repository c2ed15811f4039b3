"""The hybrid ranking: standardised rows, fused scorers, and TF-IDF joined to an encoder."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from metricbert_trainer.data.annotations import Annotations
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.errors import UsageError
from metricbert_trainer.evaluation.evaluator import evaluate_scorer
from metricbert_trainer.evaluation.hybrid import FusedScorer, with_tfidf
from metricbert_trainer.evaluation.neighbours import CONCAT, METRIC_INF
from metricbert_trainer.evaluation.ranking_rows import standardised_rows
from metricbert_trainer.evaluation.scorers import LdaScorer, TfidfScorer
from metricbert_trainer.evaluation.tfidf_cache import is_tfidf_cache


def test_each_row_is_standardised_over_its_candidates_the_query_left_out():
    rows = np.array([[0.0, 1.0, 2.0, 3.0], [5.0, 9.0, 5.0, 5.0], [4.0, 4.0, 0.0, 4.0]], dtype=np.float32)
    queries = [0, 1, 2]
    z = standardised_rows(rows, queries)
    candidates = [np.delete(row, query) for row, query in zip(z, queries, strict=True)]
    assert np.allclose(candidates[0], [-1.2247449, 0.0, 1.2247449])  # 1, 2, 3 standardised
    assert np.allclose(candidates[1], 0.0)  # no spread among the candidates: no say in the ranking
    assert np.allclose(candidates[2], 0.0)
    # The query's own entry is left out of the statistics, whatever it holds.
    assert np.allclose(standardised_rows(np.array([[100.0, 1.0, 2.0, 3.0]]), [0])[0, 1:], candidates[0])


def test_one_scorer_alone_ranks_as_it_does_unfused(wines_80):
    annotations = Annotations(similar={0: (5, 9), 3: (4,), 17: (30, 31, 32)}, source="hand-made")
    tfidf = TfidfScorer(mode=CONCAT)  # the hybrid's TF-IDF by default
    alone = evaluate_scorer(tfidf, wines_80, annotations)
    assert (
        evaluate_scorer(with_tfidf(LdaScorer(num_topics=3, max_iter=2), 1.0), wines_80, annotations) == alone
    )
    assert with_tfidf(tfidf, 0.0) is tfidf


def test_the_fused_rows_are_the_weighted_standardised_rows(wines_80, tiny_encoder):
    seeds = [0, 3, 17]
    fused = with_tfidf(tiny_encoder, 0.25, tfidf_mode=METRIC_INF).distance_rows(wines_80, seeds)
    expected = 0.75 * standardised_rows(tiny_encoder.distance_rows(wines_80, seeds), seeds)
    expected += 0.25 * standardised_rows(TfidfScorer().distance_rows(wines_80, seeds), seeds)
    assert np.allclose(fused, expected, atol=1e-5)
    # The fusion moves the ranking: neither part's order is the fused one.
    orders = [np.argsort(rows, axis=1) for rows in (fused, tiny_encoder.distance_rows(wines_80, seeds))]
    assert not np.array_equal(*orders)


def test_tfidf_compares_the_joined_fields_by_default_while_the_encoder_compares_each_field(
    wines_80, tiny_encoder
):
    seeds = [0, 3, 17]
    joined = with_tfidf(tiny_encoder, 0.25)  # concat by default
    expected = 0.75 * standardised_rows(tiny_encoder.distance_rows(wines_80, seeds), seeds)
    expected += 0.25 * standardised_rows(TfidfScorer(mode=CONCAT).distance_rows(wines_80, seeds), seeds)
    assert np.allclose(joined.distance_rows(wines_80, seeds), expected, atol=1e-5)
    # One vectoriser over title + description ranks otherwise than one per field.
    assert not np.allclose(
        joined.distance_rows(wines_80, seeds),
        with_tfidf(tiny_encoder, 0.25, tfidf_mode=METRIC_INF).distance_rows(wines_80, seeds),
    )
    assert joined.name.endswith("over joined fields") and tiny_encoder.mode == METRIC_INF


def test_nearest_lists_the_lowest_fused_distances_without_the_item(wines_80, tiny_encoder):
    hybrid = with_tfidf(tiny_encoder)
    neighbours = hybrid.nearest(wines_80, [7], 5)
    row = hybrid.distance_rows(wines_80, [7])[0]
    row[7] = np.inf
    assert 7 not in neighbours.indices[0]
    assert list(neighbours.indices[0]) == list(np.argsort(row, kind="stable")[:5])
    assert np.all(np.diff(neighbours.distances[0]) >= 0)


def test_weights_outside_their_range_are_refused(tiny_encoder):
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        with_tfidf(tiny_encoder, 1.5)
    with pytest.raises(ValueError, match="finite number >= 0"):
        FusedScorer(parts=((tiny_encoder, float("nan")),))
    with pytest.raises(ValueError, match="every weight is 0"):
        FusedScorer(parts=((tiny_encoder, 0.0),)).distance_rows(None, [0])


def test_the_tfidf_cache_gives_the_fitted_matrices_back_and_refits_for_other_texts(
    wines_80, wines_csv, tmp_path, caplog
):
    """A cached TF-IDF is read back entry for entry as fitted, without fitting; other texts or
    another setting fit again and replace the cache; a user's file is never taken for one."""
    cache = tmp_path / "items.tfidf.npz"
    fitted = TfidfScorer().item_vectors(wines_80)
    with caplog.at_level("INFO", logger="metricbert_trainer.evaluation.tfidf_cache"):
        assert _same_matrices(TfidfScorer(cache_path=cache).item_vectors(wines_80), fitted)
        assert is_tfidf_cache(cache) and "Wrote the TF-IDF" in caplog.text
        caplog.clear()
        read = TfidfScorer(cache_path=cache).item_vectors(wines_80)
        assert _same_matrices(read, fitted) and "Reusing the TF-IDF" in caplog.text
        for other in (
            TfidfScorer(sublinear_tf=False),  # another setting
            TfidfScorer(mode="concat"),  # other views
        ):
            caplog.clear()
            other.cache_path = cache
            assert _same_matrices(
                other.item_vectors(wines_80), TfidfScorer(**_settings(other)).item_vectors(wines_80)
            )
            assert "fitting again" in caplog.text
        caplog.clear()
        fewer = load_catalog(pd.read_csv(wines_csv, dtype=str, nrows=40))  # the same fields, other texts
        assert _same_matrices(
            TfidfScorer(cache_path=cache).item_vectors(fewer), TfidfScorer().item_vectors(fewer)
        )
        assert "fitting again" in caplog.text
    user_file = tmp_path / "mine.npz"
    np.savez(user_file, weights=np.arange(3))
    saved = user_file.read_bytes()
    with pytest.raises(UsageError, match="is not a TF-IDF cache"):
        TfidfScorer(cache_path=user_file).item_vectors(wines_80)
    assert user_file.read_bytes() == saved


def _settings(scorer: TfidfScorer) -> dict:
    return {"mode": scorer.mode, "sublinear_tf": scorer.sublinear_tf}


def _same_matrices(first: dict, second: dict) -> bool:
    return list(first) == list(second) and all(
        first[view].shape == second[view].shape
        and first[view].dtype == second[view].dtype
        and (first[view] != second[view]).nnz == 0
        for view in first
    )
