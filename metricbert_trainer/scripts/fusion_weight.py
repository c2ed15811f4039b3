"""Choosing TF-IDF's weight in the hybrid ranking (``evaluation.hybrid``) on the dev seeds.

Every encoder of the quality tables (the zero-shot start and the default recipe's trained
models, ``outputs/quality``: run ``benchmarks/quality_tables.py`` first) ranks every development
benchmark's dev seeds, in the plain and the masked-label view, fused with TF-IDF at each weight
of a grid, and ``dev_choice`` chooses the weight, the encoder alone (weight 0) its baseline.
(Since the teacher's shared neighbours no weight lowers nothing, as the trained wine model's
plain-view MAP and NDCG@20 fall a little at every weight, and the default stays.) The test seeds
are never read.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from metricbert_trainer.evaluation.evaluator import evaluate_distance_rows
from metricbert_trainer.evaluation.hybrid import DEFAULT_TFIDF_WEIGHT, fuse_rows
from metricbert_trainer.evaluation.scorers import TfidfScorer
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

logger = logging.getLogger(__name__)

WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 1.0)
COMMAND = "python benchmarks/fusion_weight.py"


def dev_rows(spec: QualitySpec, models_dir: Path, weights: Sequence[float]) -> list[dict]:
    """One row per (benchmark, view, encoder, training seed, weight) on the dev seeds."""
    rows = []
    for benchmark in spec.benchmarks:
        views = catalog_views(benchmark)
        dev = split_annotations(benchmark, views["plain"])["dev"]
        tfidf = {view: TfidfScorer().distance_rows(catalog, dev.seeds) for view, catalog in views.items()}
        for name, seed, view, scorer in encoder_scorers(spec, benchmark, models_dir, views):
            encoder = scorer.distance_rows(views[view], dev.seeds)
            for weight in weights:
                fused = fuse_rows([(encoder, 1 - weight), (tfidf[view], weight)], dev.seeds)
                metrics = evaluate_distance_rows(fused, dev)
                rows.append(
                    {
                        "benchmark": benchmark.name,
                        "view": view,
                        "model": name,
                        "train_seed": seed,
                        "tfidf_weight": weight,
                        "metrics": {metric: round(float(metrics[metric]), 4) for metric in METRICS},
                    }
                )
    return rows


def gains(rows: Sequence[dict]) -> Gains:
    """weight -> (benchmark, view, model) -> metric -> mean over training seeds of the metric
    minus the encoder's own (weight 0)."""
    return setting_gains(rows, lambda row: row["tfidf_weight"], baseline=0.0)


def chosen_weight(by_weight: Gains, current: float = DEFAULT_TFIDF_WEIGHT) -> float:
    """``dev_choice.chosen_setting``'s weight, the encoder alone (weight 0) the baseline."""
    return chosen_setting(by_weight, baseline=0.0, current=current)


def table(by_weight: Gains) -> str:
    """Per weight: the mean and the smallest gain of each metric over every (benchmark, view, encoder)."""
    return gains_table(by_weight, 0.0, ["TF-IDF weight"], lambda weight: [f"{weight:g}"])


def main(argv: list[str] | None = None) -> None:
    options = sweep_parser(__doc__, "docs/results/fusion_weight.jsonl").parse_args(argv)
    by_weight = gains(swept_rows(options, partial(dev_rows, weights=WEIGHTS)))
    weight = chosen_weight(by_weight)
    cases = len(next(iter(by_weight.values())))
    print(
        f"Dev seeds; gain over the encoder alone, mean and smallest over {cases} (benchmark, view, encoder) "
        f"cases; produced by `{COMMAND}`:\n\n{table(by_weight)}\n\nChosen weight: {weight:g} "
        f"(evaluation.hybrid.DEFAULT_TFIDF_WEIGHT is {DEFAULT_TFIDF_WEIGHT:g})."
    )
