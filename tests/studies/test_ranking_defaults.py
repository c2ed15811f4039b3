"""The ranking's defaults (TF-IDF weight, shared neighbours): the rule that chooses them, and the
page that quotes the choice."""

from __future__ import annotations

import numpy as np
from conftest import REPO_ROOT
from quality_tables import read_rows
from ranking_defaults import (
    ALONE,
    allowances,
    chosen,
    current,
    gains,
    harmed_cases,
    setting_of,
    table,
)

from metricbert_trainer.evaluation.neighbours import CONCAT, METRIC_INF

FIELDS, JOINED = METRIC_INF, CONCAT
RESULTS = REPO_ROOT / "docs" / "results" / "ranking_defaults.jsonl"


def row(setting: tuple, benchmark: str, value: float, seed: int | None = None, per_pool=None) -> dict:
    tfidf_weight, neighbours, weight, mode = setting
    found = {
        "benchmark": benchmark, "view": "plain", "model": "m", "train_seed": seed,
        "tfidf_weight": tfidf_weight, "shared_neighbours": neighbours, "shared_neighbour_weight": weight,
        "tfidf_mode": mode,
        "metrics": {"mpr": value, "hr@100": value, "map": value, "ndcg@20": value},
    }  # fmt: skip
    if per_pool is not None:
        found["metrics"] = {"map": float(np.mean(per_pool)), "ndcg%20": float(np.mean(per_pool))}
        found["per_pool"] = {"map": list(per_pool), "ndcg%20": list(per_pool)}
    return found


def seeded(setting: tuple, benchmark: str, values: tuple[float, ...]) -> list[dict]:
    return [row(setting, benchmark, value, seed) for seed, value in enumerate(values, start=1)]


def test_a_loss_within_the_training_seed_spread_is_no_harm_and_one_beyond_it_is():
    hybrid, reranked, greedy = (0.2, 0, 0.0, FIELDS), (0.2, 20, 0.5, FIELDS), (0.4, 50, 0.5, JOINED)
    # The encoder alone: a spread of 0.5 over training seeds on "a" and "b".
    rows = seeded(ALONE, "a", (9.5, 10.0, 10.5)) + seeded(ALONE, "b", (9.5, 10.0, 10.5))
    rows += seeded(hybrid, "a", (10.0, 10.5, 11.0)) + seeded(
        hybrid, "b", (9.2, 9.7, 10.2)
    )  # -0.3 on b: noise
    rows += seeded(reranked, "a", (10.5, 11.0, 11.5)) + seeded(
        reranked, "b", (8.5, 9.0, 9.5)
    )  # -1.0 on b: harm
    rows += seeded(greedy, "a", (12.5, 13.0, 13.5)) + seeded(
        greedy, "b", (9.3, 9.8, 10.3)
    )  # -0.2 on b: noise
    by_setting, allowed = gains(rows), allowances(rows)
    assert allowed[hybrid][("b", "plain", "m")]["map"] == 0.5
    assert harmed_cases(by_setting, allowed)[reranked] == [
        (("b", "plain", "m"), metric) for metric in ("mpr", "hr@100", "map", "ndcg@20")
    ]
    assert chosen(by_setting, allowed) == greedy  # harmless, with the largest mean MAP gain
    without = [r for r in rows if setting_of(r) not in (hybrid, greedy)]
    assert chosen(gains(without), allowances(without)) == ALONE  # every other setting harms a case


def test_on_graded_pools_a_loss_is_harm_beyond_the_standard_error_of_the_paired_differences():
    steady, noisy = (0.1, 0, 0.0, FIELDS), (0.3, 0, 0.0, JOINED)
    base = np.array([40.0, 50.0, 60.0, 30.0])
    rows = [row(ALONE, "pools", 0.0, per_pool=base)]
    rows.append(row(steady, "pools", 0.0, per_pool=base - 1.0))  # every pool 1 lower: SE 0, harm
    rows.append(row(noisy, "pools", 0.0, per_pool=base + [-9.0, 7.0, -6.0, 4.0]))  # mean -1, SE 3.6: noise
    by_setting, allowed = gains(rows), allowances(rows)
    assert by_setting[steady][("pools", "plain", "m")]["map"] == -1.0
    assert allowed[noisy][("pools", "plain", "m")]["map"] == np.std([-9.0, 7.0, -6.0, 4.0], ddof=1) / 2
    harmed = harmed_cases(by_setting, allowed)
    assert harmed[steady] and not harmed[noisy]
    assert chosen(by_setting, allowed) == noisy


def test_gains_average_the_training_seeds_before_comparing():
    rows = [row(ALONE, "a", 10.0, seed) for seed in (1, 2)]
    rows += [row((0.1, 0, 0.0, FIELDS), "a", value, seed) for seed, value in ((1, 9.0), (2, 13.0))]
    assert gains(rows)[(0.1, 0, 0.0, FIELDS)][("a", "plain", "m")]["mpr"] == 1.0


def test_the_shipped_results_choose_the_defaults_and_the_page_quotes_them():
    rows = read_rows(RESULTS)
    by_setting, allowed = gains(rows), allowances(rows)
    assert chosen(by_setting, allowed) == current()
    page = (REPO_ROOT / "docs" / "quality.md").read_text(encoding="utf-8")
    for line in table(by_setting, allowed).splitlines()[2:]:
        assert line in page, f"docs/quality.md lacks, or states otherwise, the row {line}"
