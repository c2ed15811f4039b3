"""The shared-neighbour re-ranking's default: the rule that chooses it, and the page that quotes the choice."""

from __future__ import annotations

from conftest import REPO_ROOT

from metricbert_trainer.evaluation.shared_neighbours import DEFAULT_NEIGHBOURS, DEFAULT_WEIGHT
from metricbert_trainer.scripts.quality_tables import read_rows
from metricbert_trainer.scripts.shared_neighbour_ranking import OFF, chosen, gains, table

RESULTS = REPO_ROOT / "docs" / "results" / "shared_neighbour_ranking.jsonl"


def row(neighbours: int, weight: float, benchmark: str, value: float) -> dict:
    return {
        "benchmark": benchmark, "view": "plain", "model": "m", "train_seed": None,
        "shared_neighbours": neighbours, "weight": weight,
        "metrics": {"mpr": value, "hr@100": value, "map": value, "ndcg@20": value},
    }  # fmt: skip


def test_a_setting_is_chosen_only_if_it_lowers_no_case_and_the_hybrid_alone_stays_otherwise():
    rows = [row(*OFF, "a", 10.0), row(*OFF, "b", 10.0)]
    rows += [row(20, 0.5, "a", 11.0), row(20, 0.5, "b", 10.2)]  # mean MAP gain 0.6, lowers nothing
    rows += [row(50, 0.5, "a", 13.0), row(50, 0.5, "b", 9.9)]  # mean gain 1.45, but lowers b
    assert chosen(gains(rows)) == (20, 0.5)
    assert chosen(gains([r for r in rows if r["shared_neighbours"] != 20])) == OFF


def test_the_shipped_results_choose_the_default_and_the_page_quotes_them():
    by_setting = gains(read_rows(RESULTS))
    assert chosen(by_setting) == (DEFAULT_NEIGHBOURS, DEFAULT_WEIGHT)
    page = (REPO_ROOT / "docs" / "quality.md").read_text(encoding="utf-8")
    for line in table(by_setting).splitlines()[2:]:
        assert line in page, f"docs/quality.md lacks, or states otherwise, the row {line}"
