"""Choosing TF-IDF's weight in the hybrid ranking (``evaluation.hybrid``) on the dev seeds.

Every encoder of the quality tables (the zero-shot start and the default recipe's trained
models, ``outputs/quality``: run ``benchmarks/quality_tables.py`` first) ranks every development
benchmark's dev seeds, in the plain and the masked-label view, fused with TF-IDF at each weight
of a grid. A weight's gain on one (benchmark, view, encoder) is its metric minus the encoder's
own (weight 0), averaged over training seeds. The chosen weight lowers no metric's gain below
zero anywhere and, among those, has the largest mean MAP gain: a default must help every
catalog it is run on, not the mean of two. Where no weight lowers nothing (since the teacher's
shared neighbours, the trained wine model's plain-view MAP and NDCG@20 fall a little at every
weight), the same principle keeps the default: it changes only to a weight, the encoder alone
(weight 0) included, that ranks at least as well as it on every metric of every case and better
on the mean MAP. The test seeds are never read.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from metricbert_trainer.evaluation.evaluator import evaluate_distance_rows
from metricbert_trainer.evaluation.hybrid import DEFAULT_TFIDF_WEIGHT, fuse_rows
from metricbert_trainer.evaluation.scorers import TfidfScorer
from metricbert_trainer.publishing.markdown import markdown_table
from metricbert_trainer.scripts.quality_tables import (
    METRICS,
    QualitySpec,
    catalog_views,
    encoder_scorers,
    model_folder,
    read_rows,
    split_annotations,
)

logger = logging.getLogger(__name__)

WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 1.0)
SHOWN = ("mpr", "hr@100", "map", "ndcg@20")
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


def gains(rows: Sequence[dict]) -> dict[float, dict[tuple[str, str, str], dict[str, float]]]:
    """weight -> (benchmark, view, model) -> metric -> mean over training seeds of the metric
    minus the encoder's own (weight 0)."""
    values: dict[tuple, list[float]] = defaultdict(list)
    for row in rows:
        for metric in SHOWN:
            key = (row["tfidf_weight"], row["benchmark"], row["view"], row["model"], metric)
            values[key].append(row["metrics"][metric])
    means = {key: statistics.fmean(found) for key, found in values.items()}
    result: dict[float, dict] = defaultdict(dict)
    for (weight, benchmark, view, model, metric), mean in means.items():
        alone = means[(0.0, benchmark, view, model, metric)]
        result[weight].setdefault((benchmark, view, model), {})[metric] = mean - alone
    return dict(result)


def chosen_weight(
    by_weight: dict[float, dict[tuple[str, str, str], dict[str, float]]],
    current: float = DEFAULT_TFIDF_WEIGHT,
) -> float:
    """The weight with the largest mean MAP gain among those with no gain below zero; where there is
    none, ``current``, unless another weight (0 included) is at least as good in every case and
    metric and better on the mean MAP gain, which then replaces it."""

    def mean_map(weight: float) -> float:
        return statistics.fmean(case["map"] for case in by_weight[weight].values())

    safe = [
        weight
        for weight, cases in by_weight.items()
        if weight > 0 and all(gain >= 0 for case in cases.values() for gain in case.values())
    ]
    if safe:
        return max(safe, key=mean_map)

    def at_least_as_good(weight: float, than: float) -> bool:
        return all(
            gain >= by_weight[than][case][metric]
            for case, gains_of_case in by_weight[weight].items()
            for metric, gain in gains_of_case.items()
        )

    better = [
        weight
        for weight in by_weight
        if weight != current and at_least_as_good(weight, current) and mean_map(weight) > mean_map(current)
    ]
    return max(better, key=mean_map) if better else current


def table(by_weight: dict[float, dict[tuple[str, str, str], dict[str, float]]]) -> str:
    """Per weight: the mean and the smallest gain of each metric over every (benchmark, view, encoder)."""
    headers = ["TF-IDF weight", *(f"{metric.upper()} gain: mean (min)" for metric in SHOWN)]
    body = []
    for weight in sorted(by_weight):
        if weight == 0:
            continue
        cases = by_weight[weight].values()
        cells = []
        for metric in SHOWN:
            found = [case[metric] for case in cases]
            cells.append(f"{statistics.fmean(found):+.2f} ({min(found):+.2f})")
        body.append([f"{weight:g}", *cells])
    return markdown_table(headers, body, "l" + "r" * len(SHOWN))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--spec", default="benchmarks/quality.yaml", help="The benchmark file.")
    parser.add_argument("--models-dir", default="outputs/quality", help="The quality tables' trained models.")
    parser.add_argument(
        "--results", default="docs/results/fusion_weight.jsonl", help="The JSON-lines results file."
    )
    parser.add_argument("--report", action="store_true", help="Print the table of the results file and exit.")
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    results = Path(options.results)
    if not options.report:
        spec = QualitySpec.from_yaml(options.spec)
        for benchmark in spec.benchmarks:
            for seed in spec.train_seeds:
                folder = model_folder(Path(options.models_dir), benchmark, seed)
                if not (folder / "model.safetensors").is_file():
                    raise SystemExit(
                        f"{folder} holds no trained model: run python benchmarks/quality_tables.py first."
                    )
        rows = dev_rows(spec, Path(options.models_dir), WEIGHTS)
        results.parent.mkdir(parents=True, exist_ok=True)
        results.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    by_weight = gains(read_rows(results))
    weight = chosen_weight(by_weight)
    cases = len(next(iter(by_weight.values())))
    print(
        f"Dev seeds; gain over the encoder alone, mean and smallest over {cases} (benchmark, view, encoder) "
        f"cases; produced by `{COMMAND}`:\n\n{table(by_weight)}\n\nChosen weight: {weight:g} "
        f"(evaluation.hybrid.DEFAULT_TFIDF_WEIGHT is {DEFAULT_TFIDF_WEIGHT:g})."
    )
