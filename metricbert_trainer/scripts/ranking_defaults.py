"""Choosing the ranking of ``evaluate`` and ``recommend`` on the dev seeds: TF-IDF's weight in the
hybrid and the shared-neighbour re-ranking's size and weight, together.

Every encoder of the quality tables (the zero-shot start and the default recipe's trained
models, ``outputs/quality``: run ``benchmarks/quality_tables.py`` first) ranks every development
benchmark's dev seeds, in the plain and the masked-label view, fused with TF-IDF at each weight
of a grid (``evaluation.hybrid``), each hybrid then re-ranked by shared neighbours
(``evaluation.shared_neighbours``) at each neighbour count and weight of a grid, or not at all.
The three settings are chosen together because they trade with each other: the re-ranking lists
neighbours under the hybrid, so TF-IDF's share changes which items it lists. ``dev_choice``
chooses the setting, the encoder alone (no TF-IDF, no re-ranking) its baseline: what a user
would have without either. The test seeds are never read.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path

from metricbert_trainer.evaluation.evaluator import evaluate_distance_rows
from metricbert_trainer.evaluation.hybrid import DEFAULT_TFIDF_WEIGHT, with_tfidf
from metricbert_trainer.evaluation.shared_neighbours import (
    DEFAULT_NEIGHBOURS,
    DEFAULT_WEIGHT,
    membership,
    neighbour_lists,
    overlap_rows,
    reranked_rows,
)
from metricbert_trainer.scripts.dev_choice import (
    Gains,
    chosen_setting,
    gains_table,
    setting_gains,
    sweep_parser,
    swept_rows,
)
from metricbert_trainer.scripts.quality_tables import (
    METRICS,
    QualitySpec,
    catalog_views,
    encoder_scorers,
    split_annotations,
)

TFIDF_WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)
NEIGHBOURS = (10, 20, 50, 100)
WEIGHTS = (0.1, 0.25, 0.5, 0.75)
# A setting is (TF-IDF weight, neighbours, their weight); 0 neighbours: no re-ranking.
Setting = tuple[float, int, float]
# The encoder alone: no TF-IDF, no re-ranking.
ALONE: Setting = (0.0, 0, 0.0)
COMMAND = "python benchmarks/ranking_defaults.py"


def dev_rows(
    spec: QualitySpec,
    models_dir: Path,
    tfidf_weights: Sequence[float],
    neighbours: Sequence[int],
    weights: Sequence[float],
) -> list[dict]:
    """One row per (benchmark, view, encoder, training seed, setting) on the dev seeds, each
    hybrid alone (0 neighbours) among them. Each hybrid lists the largest neighbour count once;
    a smaller count takes the head of each list (they are sorted nearest first)."""
    rows = []
    for benchmark in spec.benchmarks:
        views = catalog_views(benchmark)
        dev = split_annotations(benchmark, views["plain"])["dev"]
        for name, seed, view, scorer in encoder_scorers(spec, benchmark, models_dir, views):
            settings = {}
            for tfidf_weight in tfidf_weights:
                rank = with_tfidf(scorer, tfidf_weight).row_ranker(views[view])
                hybrid = rank(dev.seeds)
                lists = neighbour_lists(rank, len(views[view]), max(neighbours))
                settings[(tfidf_weight, 0, 0.0)] = hybrid
                for count in neighbours:
                    overlaps = overlap_rows(membership(lists[:, :count]), dev.seeds)
                    for weight in weights:
                        settings[(tfidf_weight, count, weight)] = reranked_rows(
                            hybrid, overlaps, weight, dev.seeds
                        )
            for (tfidf_weight, count, weight), distances in settings.items():
                metrics = evaluate_distance_rows(distances, dev)
                rows.append(
                    {
                        "benchmark": benchmark.name,
                        "view": view,
                        "model": name,
                        "train_seed": seed,
                        "tfidf_weight": tfidf_weight,
                        "shared_neighbours": count,
                        "shared_neighbour_weight": weight,
                        "metrics": {metric: round(float(metrics[metric]), 4) for metric in METRICS},
                    }
                )
    return rows


def setting_of(row: dict) -> Setting:
    return (row["tfidf_weight"], row["shared_neighbours"], row["shared_neighbour_weight"])


def gains(rows: Sequence[dict]) -> Gains:
    """setting -> (benchmark, view, model) -> metric -> mean over training seeds of the metric
    minus the encoder's own alone."""
    return setting_gains(rows, setting_of, baseline=ALONE)


def current() -> Setting:
    """The library's defaults as a setting."""
    return (DEFAULT_TFIDF_WEIGHT, DEFAULT_NEIGHBOURS, DEFAULT_WEIGHT if DEFAULT_NEIGHBOURS else 0.0)


def chosen(by_setting: Gains) -> Setting:
    """``dev_choice.chosen_setting``, the encoder alone the baseline and the library's defaults
    the current setting (the encoder alone where the grid lacks them)."""
    now = current()
    return chosen_setting(by_setting, baseline=ALONE, current=now if now in by_setting else ALONE)


def table(by_setting: Gains) -> str:
    """Per setting: the mean and the smallest gain of each metric over every (benchmark, view, encoder)."""
    return gains_table(
        by_setting,
        ALONE,
        ["TF-IDF weight", "neighbours", "their weight"],
        lambda setting: [f"{setting[0]:g}", str(setting[1]), f"{setting[2]:g}" if setting[1] else "-"],
    )


def main(argv: list[str] | None = None) -> None:
    options = sweep_parser(__doc__, "docs/results/ranking_defaults.jsonl").parse_args(argv)
    sweep = partial(dev_rows, tfidf_weights=TFIDF_WEIGHTS, neighbours=NEIGHBOURS, weights=WEIGHTS)
    by_setting = gains(swept_rows(options, sweep))
    tfidf_weight, count, weight = chosen(by_setting)
    cases = len(next(iter(by_setting.values())))
    reranking = f"{count} shared neighbours at weight {weight:g}" if count else "no re-ranking"
    print(
        f"Dev seeds; gain over the encoder alone, mean and smallest over {cases} (benchmark, view, encoder) "
        f"cases; produced by `{COMMAND}`:\n\n{table(by_setting)}\n\nChosen: TF-IDF weight {tfidf_weight:g}, "
        f"{reranking} (the library's defaults: {current()})."
    )
