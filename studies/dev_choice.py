"""The rule that turns a sweep on dev seeds into a default, shared by every ranking setting.

A sweep ranks the dev seeds of each (benchmark, view, encoder) case at every setting of a grid
(TF-IDF's weight in the hybrid, the shared-neighbour re-ranking's size and weight), one row per
training seed. A setting's gain on a case is its metric minus the case's own at the ``baseline``
setting (the scorer without the addition), averaged over training seeds first. A default must
help every catalog it is run on, not the mean of two: the chosen setting lowers no metric's gain
below zero anywhere and, among those, has the largest mean MAP gain. Where none does, the
``current`` default stays, unless another setting (the baseline included) ranks at least as well
as it on every metric of every case and better on the mean MAP.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import replace
from pathlib import Path

from quality_tables import QualitySpec, model_folder, read_rows

from metricbert_trainer.publishing.markdown import markdown_table

# The metrics a choice reads: the seed benchmarks' and the graded pools' (a row has those of its kind).
SHOWN = ("mpr", "hr@100", "map", "ndcg@20", "ndcg%20")

Case = tuple[str, str, str]
Gains = dict[Hashable, dict[Case, dict[str, float]]]


def setting_gains(rows: Sequence[dict], setting: Callable[[dict], Hashable], baseline: Hashable) -> Gains:
    """setting -> (benchmark, view, model) -> metric -> mean over training seeds of the metric
    minus the same case's at ``baseline``; ``setting`` reads a row's setting."""
    values: dict[tuple, list[float]] = defaultdict(list)
    for row in rows:
        for metric in (name for name in SHOWN if name in row["metrics"]):
            key = (setting(row), row["benchmark"], row["view"], row["model"], metric)
            values[key].append(row["metrics"][metric])
    means = {key: statistics.fmean(found) for key, found in values.items()}
    result: Gains = defaultdict(dict)
    for (chosen, benchmark, view, model, metric), mean in means.items():
        alone = means[(baseline, benchmark, view, model, metric)]
        result[chosen].setdefault((benchmark, view, model), {})[metric] = mean - alone
    return dict(result)


def chosen_setting(by_setting: Gains, baseline: Hashable, current: Hashable) -> Hashable:
    """The rule of this module's docstring."""

    def mean_map(setting: Hashable) -> float:
        return statistics.fmean(case["map"] for case in by_setting[setting].values())

    safe = [
        setting
        for setting, cases in by_setting.items()
        if setting != baseline and all(gain >= 0 for case in cases.values() for gain in case.values())
    ]
    if safe:
        return max(safe, key=mean_map)

    def at_least_as_good(setting: Hashable, than: Hashable) -> bool:
        return all(
            gain >= by_setting[than][case][metric]
            for case, gains_of_case in by_setting[setting].items()
            for metric, gain in gains_of_case.items()
        )

    better = [
        setting
        for setting in by_setting
        if setting != current and at_least_as_good(setting, current) and mean_map(setting) > mean_map(current)
    ]
    return max(better, key=mean_map) if better else current


def gains_table(by_setting: Gains, baseline: Hashable, headers: Sequence[str], label: Callable) -> str:
    """Per setting but the baseline (in sorted order; ``label`` gives its cells under ``headers``):
    the mean and the smallest gain of each metric over every (benchmark, view, encoder) case."""
    # The metrics the cases have: a sweep of seed benchmarks alone shows no pool metric.
    shown = [metric for metric in SHOWN if any(metric in case for case in by_setting[baseline].values())]
    body = []
    for setting in sorted(by_setting):
        if setting == baseline:
            continue
        cases = by_setting[setting].values()
        cells = []
        for metric in shown:
            found = [case[metric] for case in cases if metric in case]
            cells.append(f"{statistics.fmean(found):+.2f} ({min(found):+.2f})")
        body.append([*label(setting), *cells])
    columns = [*headers, *(f"{metric.upper()} gain: mean (min)" for metric in shown)]
    return markdown_table(columns, body, "l" * len(headers) + "r" * len(shown))


def sweep_parser(description: str, results: str) -> argparse.ArgumentParser:
    """A sweep script's options: the benchmark file, the quality tables' models, the results file
    (``results`` by default) and ``--report``."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--spec", default="studies/quality.yaml", help="The benchmark file.")
    parser.add_argument("--models-dir", default="outputs/quality", help="The quality tables' trained models.")
    parser.add_argument("--results", default=results, help="The JSON-lines results file.")
    parser.add_argument("--report", action="store_true", help="Print the table of the results file and exit.")
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="BENCHMARK",
        help="Sweep these benchmarks only (the rows of the others are kept).",
    )
    return parser


def swept_rows(options: argparse.Namespace, sweep: Callable[[QualitySpec, Path], list[dict]]) -> list[dict]:
    """The rows of ``options.results``, first written anew by ``sweep`` (spec, models folder)
    unless ``--report``, for the benchmarks of ``--only`` (every one by default; the rows of the
    others are kept); a missing trained model stops the sweep before it starts."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    results = Path(options.results)
    if not options.report:
        spec = QualitySpec.from_yaml(options.spec)
        if options.only:
            unknown = set(options.only) - {benchmark.name for benchmark in spec.benchmarks}
            if unknown:
                raise SystemExit(f"{options.spec} has no benchmarks {sorted(unknown)}.")
            spec = replace(spec, benchmarks=tuple(b for b in spec.benchmarks if b.name in options.only))
        for benchmark in spec.benchmarks:
            for seed in spec.train_seeds:
                folder = model_folder(Path(options.models_dir), benchmark, seed)
                if not (folder / "model.safetensors").is_file():
                    raise SystemExit(
                        f"{folder} holds no trained model: run python studies/quality_tables.py first."
                    )
        swept = {benchmark.name for benchmark in spec.benchmarks}
        kept = [row for row in read_rows(results) if row["benchmark"] not in swept]
        rows = kept + sweep(spec, Path(options.models_dir))
        results.parent.mkdir(parents=True, exist_ok=True)
        results.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return read_rows(results)
