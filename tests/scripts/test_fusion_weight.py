"""The hybrid's TF-IDF weight: the rule that chooses it, and the page that quotes the choice."""

from __future__ import annotations

from conftest import REPO_ROOT

from metricbert_trainer.evaluation.hybrid import DEFAULT_TFIDF_WEIGHT
from metricbert_trainer.scripts.fusion_weight import chosen_weight, gains, table
from metricbert_trainer.scripts.quality_tables import read_rows

RESULTS = REPO_ROOT / "docs" / "results" / "fusion_weight.jsonl"


def row(weight: float, benchmark: str, value: float, seed: int = 1) -> dict:
    return {
        "benchmark": benchmark, "view": "plain", "model": "m", "train_seed": seed, "tfidf_weight": weight,
        "metrics": {"mpr": value, "hr@100": value, "map": value, "ndcg@20": value},
    }  # fmt: skip


def test_the_rule_takes_the_best_mean_among_weights_that_lower_nothing():
    rows = [row(0.0, "a", 10.0), row(0.0, "b", 10.0)]
    rows += [row(0.2, "a", 11.0), row(0.2, "b", 10.5)]  # mean gain 0.75, never below the encoder
    rows += [row(0.4, "a", 14.0), row(0.4, "b", 9.9)]  # mean gain 1.95, but lowers b
    by_weight = gains(rows)
    assert by_weight[0.4][("b", "plain", "m")]["map"] < 0
    assert chosen_weight(by_weight) == 0.2


def test_where_every_weight_lowers_a_case_the_default_stays_unless_another_is_as_good_everywhere():
    rows = [row(0.0, "a", 10.0), row(0.0, "b", 10.0)]
    rows += [row(0.2, "a", 9.9), row(0.2, "b", 12.0)]  # lowers a a little, raises b more
    rows += [row(0.4, "a", 9.5), row(0.4, "b", 14.0)]  # the best mean, but below 0.2 on a
    by_weight = gains(rows)
    assert chosen_weight(by_weight, current=0.2) == 0.2
    assert chosen_weight(by_weight, current=0.0) == 0.0  # neither weight is as good as the encoder alone on a
    rows += [row(0.1, "a", 9.95), row(0.1, "b", 12.5)]  # at least as good as 0.2 in both, better mean
    assert chosen_weight(gains(rows), current=0.2) == 0.1


def test_gains_average_the_training_seeds_before_comparing():
    rows = [row(0.0, "a", 10.0, seed) for seed in (1, 2)] + [
        row(0.1, "a", v, s) for s, v in ((1, 9.0), (2, 13.0))
    ]
    assert gains(rows)[0.1][("a", "plain", "m")]["mpr"] == 1.0


def test_the_shipped_results_choose_the_default_and_the_page_quotes_them():
    by_weight = gains(read_rows(RESULTS))
    assert chosen_weight(by_weight) == DEFAULT_TFIDF_WEIGHT
    page = (REPO_ROOT / "docs" / "quality.md").read_text(encoding="utf-8")
    for line in table(by_weight).splitlines()[2:]:
        assert line in page, f"docs/quality.md lacks, or states otherwise, the row {line}"
