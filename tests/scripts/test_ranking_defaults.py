"""The ranking's defaults (TF-IDF weight, shared neighbours): the rule that chooses them, and the
page that quotes the choice."""

from __future__ import annotations

from conftest import REPO_ROOT

from metricbert_trainer.scripts.quality_tables import read_rows
from metricbert_trainer.scripts.ranking_defaults import ALONE, chosen, current, gains, table

RESULTS = REPO_ROOT / "docs" / "results" / "ranking_defaults.jsonl"


def row(setting: tuple, benchmark: str, value: float, seed: int | None = None) -> dict:
    tfidf_weight, neighbours, weight = setting
    return {
        "benchmark": benchmark, "view": "plain", "model": "m", "train_seed": seed,
        "tfidf_weight": tfidf_weight, "shared_neighbours": neighbours, "shared_neighbour_weight": weight,
        "metrics": {"mpr": value, "hr@100": value, "map": value, "ndcg@20": value},
    }  # fmt: skip


def test_a_setting_is_chosen_only_if_it_lowers_no_case_and_the_encoder_alone_stays_otherwise():
    hybrid, reranked, greedy = (0.2, 0, 0.0), (0.2, 20, 0.5), (0.4, 50, 0.5)
    rows = [row(ALONE, "a", 10.0), row(ALONE, "b", 10.0)]
    rows += [row(hybrid, "a", 10.5), row(hybrid, "b", 9.8)]  # lowers b
    rows += [row(reranked, "a", 11.0), row(reranked, "b", 10.2)]  # mean MAP gain 0.6, lowers nothing
    rows += [row(greedy, "a", 13.0), row(greedy, "b", 9.9)]  # mean gain 1.45, but lowers b
    assert chosen(gains(rows)) == reranked
    assert chosen(gains([r for r in rows if r["shared_neighbours"] != 20])) == ALONE


def test_gains_average_the_training_seeds_before_comparing():
    rows = [row(ALONE, "a", 10.0, seed) for seed in (1, 2)]
    rows += [row((0.1, 0, 0.0), "a", value, seed) for seed, value in ((1, 9.0), (2, 13.0))]
    assert gains(rows)[(0.1, 0, 0.0)][("a", "plain", "m")]["mpr"] == 1.0


def test_the_shipped_results_choose_the_defaults_and_the_page_quotes_them():
    by_setting = gains(read_rows(RESULTS))
    assert chosen(by_setting) == current()
    page = (REPO_ROOT / "docs" / "quality.md").read_text(encoding="utf-8")
    for line in table(by_setting).splitlines()[2:]:
        assert line in page, f"docs/quality.md lacks, or states otherwise, the row {line}"
