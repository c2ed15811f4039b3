"""Choosing the shared-neighbour re-ranking of ``evaluate`` and ``recommend`` on the dev seeds.

Every encoder of the quality tables (the zero-shot start and the default recipe's trained
models, ``outputs/quality``: run ``benchmarks/quality_tables.py`` first) ranks every development
benchmark's dev seeds, in the plain and the masked-label view, as the hybrid of
``evaluation.hybrid`` (the commands' ranking before the re-ranking), then re-ranked by shared neighbours
(``evaluation.shared_neighbours``) at each neighbour count and weight of a grid.
``dev_choice`` chooses the setting, the hybrid alone its baseline: the re-ranking becomes the
default only if some setting lowers no metric of any case. The test seeds are never read.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path

from metricbert_trainer.evaluation.evaluator import evaluate_distance_rows
from metricbert_trainer.evaluation.hybrid import with_tfidf
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

NEIGHBOURS = (10, 20, 50, 100)
WEIGHTS = (0.1, 0.25, 0.5, 0.75)
# The hybrid alone: no shared neighbours.
OFF = (0, 0.0)
COMMAND = "python benchmarks/shared_neighbour_ranking.py"


def dev_rows(
    spec: QualitySpec, models_dir: Path, neighbours: Sequence[int], weights: Sequence[float]
) -> list[dict]:
    """One row per (benchmark, view, encoder, training seed, setting) on the dev seeds, the
    hybrid alone (``OFF``) among them. Each encoder's hybrid lists the largest neighbour count
    once; a smaller count takes the head of each list (they are sorted nearest first)."""
    rows = []
    for benchmark in spec.benchmarks:
        views = catalog_views(benchmark)
        dev = split_annotations(benchmark, views["plain"])["dev"]
        for name, seed, view, scorer in encoder_scorers(spec, benchmark, models_dir, views):
            rank = with_tfidf(scorer).row_ranker(views[view])
            hybrid = rank(dev.seeds)
            lists = neighbour_lists(rank, len(views[view]), max(neighbours))
            settings = {OFF: hybrid}
            for count in neighbours:
                overlaps = overlap_rows(membership(lists[:, :count]), dev.seeds)
                for weight in weights:
                    settings[(count, weight)] = reranked_rows(hybrid, overlaps, weight, dev.seeds)
            for (count, weight), distances in settings.items():
                metrics = evaluate_distance_rows(distances, dev)
                rows.append(
                    {
                        "benchmark": benchmark.name,
                        "view": view,
                        "model": name,
                        "train_seed": seed,
                        "shared_neighbours": count,
                        "weight": weight,
                        "metrics": {metric: round(float(metrics[metric]), 4) for metric in METRICS},
                    }
                )
    return rows


def gains(rows: Sequence[dict]) -> Gains:
    """(neighbours, weight) -> (benchmark, view, model) -> metric -> mean over training seeds of
    the metric minus the hybrid's own."""
    return setting_gains(rows, lambda row: (row["shared_neighbours"], row["weight"]), baseline=OFF)


def chosen(by_setting: Gains) -> tuple[int, float]:
    """``dev_choice.chosen_setting``, the hybrid alone the baseline and the library's default the
    current setting (the hybrid alone where the grid lacks it)."""
    current = (DEFAULT_NEIGHBOURS, DEFAULT_WEIGHT)
    return chosen_setting(by_setting, baseline=OFF, current=current if current in by_setting else OFF)


def table(by_setting: Gains) -> str:
    """Per setting: the mean and the smallest gain of each metric over every (benchmark, view, encoder)."""
    return gains_table(
        by_setting, OFF, ["neighbours", "weight"], lambda setting: [str(setting[0]), f"{setting[1]:g}"]
    )


def main(argv: list[str] | None = None) -> None:
    options = sweep_parser(__doc__, "docs/results/shared_neighbour_ranking.jsonl").parse_args(argv)
    by_setting = gains(swept_rows(options, partial(dev_rows, neighbours=NEIGHBOURS, weights=WEIGHTS)))
    count, weight = chosen(by_setting)
    cases = len(next(iter(by_setting.values())))
    choice = f"{count} neighbours, weight {weight:g}" if count else "none (the hybrid alone)"
    print(
        f"Dev seeds; gain over the hybrid alone, mean and smallest over {cases} (benchmark, view, encoder) "
        f"cases; produced by `{COMMAND}`:\n\n{table(by_setting)}\n\nChosen: {choice} "
        f"(evaluation.shared_neighbours.DEFAULT_NEIGHBOURS is {DEFAULT_NEIGHBOURS})."
    )
