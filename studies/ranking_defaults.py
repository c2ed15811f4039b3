"""Choosing the ranking of ``evaluate`` and ``recommend`` on the dev seeds: TF-IDF's weight and
views in the hybrid and the shared-neighbour re-ranking's size and weight, together.

Every encoder of the quality tables (the zero-shot start and the default recipe's trained
models, ``outputs/quality``: run ``studies/quality_tables.py`` first) ranks every development
benchmark's dev judgments, in each view the benchmark has, fused with TF-IDF at each weight
of a grid (``evaluation.hybrid``), TF-IDF comparing each field on its own (``metric_inf``, the
encoder's own views) or the joined fields (``concat``), each hybrid then re-ranked by shared neighbours
(``evaluation.shared_neighbours``) at each neighbour count and weight of a grid, or not at all.
The settings are chosen together because they trade with each other: the re-ranking lists
neighbours under the hybrid, so TF-IDF's share changes which items it lists. The test seeds are
never read.

The rule (written before any row of the expert-judged benchmark was read). A case is a
(benchmark, view, encoder); a setting's gain on a case is its metric minus the same encoder's
alone (no TF-IDF, no re-ranking), on the same judgments.

* On a benchmark of annotated seeds (the category benchmarks), each metric of ``SHOWN`` is
  averaged over training seeds first; the noise allowance of a (benchmark, view) is the standard
  deviation over training seeds of the trained encoder's own metric alone, the same for its
  zero-shot case.
* On a benchmark of expert-graded pools, the gain is the mean over pools of the paired per-pool
  difference (each pool's metric averaged over training seeds first); the allowance is that
  difference's standard error, ``sd / sqrt(pools)``.
* A setting harms a case when a gain is below minus its allowance. The chosen setting harms no
  case of any benchmark and, among those, has the largest mean MAP gain over all cases. Where
  every setting harms some case, the default is the encoder alone, and the fusion and the
  re-ranking stay options for the catalogs they help.

TF-IDF's views joined into one text (``concat``) entered the grid after the rule and the first
sweep, with the rule unchanged: the issue on expert similarity measured Metric_Inf fused with one
TF-IDF over title and abstract above the encoder alone on all 50 of CSFCube's query-facets.

    python studies/ranking_defaults.py                  # ranks, writes docs/results/ranking_defaults.jsonl
    python studies/ranking_defaults.py --only csfcube   # one benchmark; the rows of the others are kept
    python studies/ranking_defaults.py --report         # the tables of the results file
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import numpy as np
from dev_choice import Gains, gains_table, setting_gains, sweep_parser, swept_rows
from quality_tables import (
    TABLE_NEIGHBOUR_WEIGHT,
    TABLE_NEIGHBOURS,
    TABLE_TFIDF_WEIGHT,
    QualitySpec,
    catalog_views,
    encoder_scorers,
    judged_metrics,
    judged_queries,
    split_annotations,
    with_metrics,
)
from scipy.stats import wilcoxon

from metricbert_trainer.evaluation.hybrid import (
    DEFAULT_TFIDF_MODE,
    DEFAULT_TFIDF_WEIGHT,
    TFIDF_VIEWS,
    with_tfidf,
)
from metricbert_trainer.evaluation.neighbours import CONCAT, METRIC_INF
from metricbert_trainer.evaluation.shared_neighbours import (
    DEFAULT_NEIGHBOURS,
    DEFAULT_WEIGHT,
    membership,
    neighbour_lists,
    overlap_rows,
    reranked_rows,
)
from metricbert_trainer.publishing.markdown import markdown_table

TFIDF_WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)
TFIDF_MODES = (METRIC_INF, CONCAT)
NEIGHBOURS = (10, 20, 50, 100)
WEIGHTS = (0.1, 0.25, 0.5, 0.75)
# A setting is (TF-IDF weight, neighbours, their weight, TF-IDF's views); 0 neighbours: no
# re-ranking. At TF-IDF weight 0 the views are metric_inf's (no TF-IDF is computed).
Setting = tuple[float, int, float, str]
# The encoder alone: no TF-IDF, no re-ranking.
ALONE: Setting = (0.0, 0, 0.0, METRIC_INF)
COMMAND = "python studies/ranking_defaults.py"


def dev_rows(
    spec: QualitySpec,
    models_dir: Path,
    tfidf_weights: Sequence[float],
    neighbours: Sequence[int],
    weights: Sequence[float],
    tfidf_modes: Sequence[str] = (METRIC_INF,),
) -> list[dict]:
    """One row per (benchmark, view, encoder, training seed, setting) on the dev seeds, each
    hybrid alone (0 neighbours) among them. Each hybrid lists the largest neighbour count once;
    a smaller count takes the head of each list (they are sorted nearest first)."""
    rows = []
    for benchmark in spec.benchmarks:
        views = catalog_views(benchmark)
        dev = split_annotations(benchmark, views["plain"])["dev"]
        queries = judged_queries(dev)
        for name, seed, view, scorer in encoder_scorers(spec, benchmark, models_dir, views):
            settings = {}
            # The encoder alone computes no TF-IDF: its views are metric_inf's only.
            hybrids = [(0.0, METRIC_INF)] if 0.0 in tfidf_weights else []
            hybrids += [(weight, mode) for weight in tfidf_weights if weight for mode in tfidf_modes]
            for tfidf_weight, mode in hybrids:
                rank = with_tfidf(scorer, tfidf_weight, tfidf_mode=mode).row_ranker(views[view])
                hybrid = rank(queries)
                lists = neighbour_lists(rank, len(views[view]), max(neighbours))
                settings[(tfidf_weight, 0, 0.0, mode)] = hybrid
                for count in neighbours:
                    overlaps = overlap_rows(membership(lists[:, :count]), queries)
                    for weight in weights:
                        settings[(tfidf_weight, count, weight, mode)] = reranked_rows(
                            hybrid, overlaps, weight, queries
                        )
            for (tfidf_weight, count, weight, mode), distances in settings.items():
                row = {
                    "benchmark": benchmark.name,
                    "view": view,
                    "model": name,
                    "train_seed": seed,
                    "tfidf_weight": tfidf_weight,
                    "tfidf_mode": mode,
                    "shared_neighbours": count,
                    "shared_neighbour_weight": weight,
                }
                rows.append(with_metrics(row, judged_metrics(distances, queries, dev)))
    return rows


def setting_of(row: dict) -> Setting:
    return (row["tfidf_weight"], row["shared_neighbours"], row["shared_neighbour_weight"], row["tfidf_mode"])


def gains(rows: Sequence[dict]) -> Gains:
    """setting -> (benchmark, view, model) -> metric -> mean over training seeds of the metric
    minus the encoder's own alone."""
    return setting_gains(rows, setting_of, baseline=ALONE)


def allowances(rows: Sequence[dict]) -> Gains:
    """setting -> case -> metric -> the noise allowance of the rule (module docstring): the
    training-seed spread of a category benchmark's trained encoder alone, or the standard error
    of an expert-judged benchmark's paired per-pool differences from the encoder alone."""
    spread: dict[tuple[str, str, str], float] = {}
    alone = [row for row in rows if setting_of(row) == ALONE and row["train_seed"] is not None]
    for benchmark, view in {(row["benchmark"], row["view"]) for row in alone}:
        runs = [row for row in alone if (row["benchmark"], row["view"]) == (benchmark, view)]
        for metric in runs[0]["metrics"]:
            values = [row["metrics"][metric] for row in runs]
            spread[(benchmark, view, metric)] = statistics.stdev(values) if len(values) > 1 else 0.0
    pools = paired_pool_values(rows)
    result: Gains = {}
    for setting, cases in gains(rows).items():
        for case, case_gains in cases.items():
            benchmark, view, _ = case
            entry = result.setdefault(setting, {}).setdefault(case, {})
            for metric in case_gains:
                if (setting, case) in pools:
                    differences = pools[(setting, case)][metric] - pools[(ALONE, case)][metric]
                    entry[metric] = float(np.std(differences, ddof=1) / np.sqrt(len(differences)))
                else:
                    entry[metric] = spread.get((benchmark, view, metric), 0.0)
    return result


def paired_pool_values(rows: Sequence[dict]) -> dict[tuple, dict[str, np.ndarray]]:
    """(setting, case) -> metric -> each pool's value, averaged over training seeds, for the rows
    of expert-judged benchmarks (those with ``per_pool``)."""
    grouped: dict[tuple, list[dict]] = {}
    for row in rows:
        if "per_pool" in row:
            key = (setting_of(row), (row["benchmark"], row["view"], row["model"]))
            grouped.setdefault(key, []).append(row["per_pool"])
    return {
        key: {metric: np.mean([np.asarray(run[metric]) for run in runs], axis=0) for metric in runs[0]}
        for key, runs in grouped.items()
    }


def harmed_cases(by_setting: Gains, allowed: Gains) -> dict[Setting, list[tuple]]:
    """setting -> the (case, metric) pairs whose gain lies below minus its allowance."""
    return {
        setting: [
            (case, metric)
            for case, case_gains in cases.items()
            for metric, gain in case_gains.items()
            if gain < -allowed[setting][case][metric]
        ]
        for setting, cases in by_setting.items()
    }


def current() -> Setting:
    """The library's defaults as a setting."""
    mode = (DEFAULT_TFIDF_MODE or METRIC_INF) if DEFAULT_TFIDF_WEIGHT else METRIC_INF
    return (DEFAULT_TFIDF_WEIGHT, DEFAULT_NEIGHBOURS, DEFAULT_WEIGHT if DEFAULT_NEIGHBOURS else 0.0, mode)


def chosen(by_setting: Gains, allowed: Gains) -> Setting:
    """The rule of the module's docstring: among the settings that harm no case, the largest mean
    MAP gain; the encoder alone where every setting harms some case."""
    harmless = [
        setting
        for setting, harmed in harmed_cases(by_setting, allowed).items()
        if setting != ALONE and not harmed
    ]

    def mean_map(setting: Setting) -> float:
        return statistics.fmean(case["map"] for case in by_setting[setting].values())

    return max(harmless, key=mean_map) if harmless else ALONE


def table(by_setting: Gains, allowed: Gains) -> str:
    """Per setting: the (case, metric) pairs it harms, then the mean and the smallest gain of each
    metric over every (benchmark, view, encoder) that has it."""
    harmed = harmed_cases(by_setting, allowed)
    return gains_table(
        by_setting,
        ALONE,
        ["TF-IDF weight", "TF-IDF over", "neighbours", "their weight", "harms"],
        lambda setting: [
            f"{setting[0]:g}",
            TFIDF_VIEWS[setting[3]] if setting[0] else "-",
            str(setting[1]),
            f"{setting[2]:g}" if setting[1] else "-",
            str(len(harmed[setting])),
        ],
    )


def benchmark_table(by_setting: Gains, allowed: Gains, settings: Sequence[Setting]) -> str:
    """Each benchmark's mean MAP gain (and the allowance of its cases, mean) under ``settings``."""
    benchmarks = list(dict.fromkeys(case[0] for case in by_setting[ALONE]))
    body = []
    for setting in settings:
        cells = []
        for benchmark in benchmarks:
            cases = [case for case in by_setting[setting] if case[0] == benchmark]
            gain = statistics.fmean(by_setting[setting][case]["map"] for case in cases)
            allowance = statistics.fmean(allowed[setting][case]["map"] for case in cases)
            cells.append(f"{gain:+.2f} (±{allowance:.2f})")
        body.append([describe(setting), *cells])
    return markdown_table(
        ["ranking", *(f"{name} MAP gain (allowance)" for name in benchmarks)],
        body,
        "l" + "r" * len(benchmarks),
    )


def paired_pools_table(rows: Sequence[dict], settings: Sequence[Setting]) -> str:
    """Per expert-judged case and each of ``settings``: the paired per-pool MAP and NDCG%20
    differences from the encoder alone (each pool's value averaged over training seeds), as mean ±
    standard error, the pools each way, and the Wilcoxon signed-rank test's two-sided p (scipy)."""
    pools = paired_pool_values(rows)
    body = []
    for setting in settings:
        for (chosen, case), values in pools.items():
            if chosen != setting or setting == ALONE:
                continue
            cells = []
            for metric in ("map", "ndcg%20"):
                differences = values[metric] - pools[(ALONE, case)][metric]
                error = np.std(differences, ddof=1) / np.sqrt(len(differences))
                changed = differences[differences != 0]
                p_value = wilcoxon(changed).pvalue if len(changed) else 1.0
                cells += [
                    f"{differences.mean():+.2f} ± {error:.2f}",
                    f"{(differences > 0).sum()} / {(differences < 0).sum()}",
                    f"{p_value:.3f}",
                ]
            body.append([case[0], case[2], describe(setting), *cells])
    headers = ["benchmark", "encoder", "ranking"]
    for metric in ("MAP", "NDCG%20"):
        headers += [f"{metric} paired gain", f"{metric} pools up / down", f"{metric} Wilcoxon p"]
    return markdown_table(headers, body, "lll" + "r" * 6)


def describe(setting: Setting) -> str:
    """A setting in words."""
    tfidf_weight, count, weight, mode = setting
    if setting == ALONE:
        return "the encoder alone"
    over = " over the joined fields" if mode == CONCAT else ""
    parts = [f"TF-IDF {tfidf_weight:g}{over}"] if tfidf_weight else []
    if count:
        parts.append(f"{count} shared neighbours at {weight:g}")
    return " + ".join(parts)


def main(argv: list[str] | None = None) -> None:
    options = sweep_parser(__doc__, "docs/results/ranking_defaults.jsonl").parse_args(argv)
    sweep = partial(
        dev_rows, tfidf_weights=TFIDF_WEIGHTS, neighbours=NEIGHBOURS, weights=WEIGHTS, tfidf_modes=TFIDF_MODES
    )
    rows = swept_rows(options, sweep)
    by_setting, allowed = gains(rows), allowances(rows)
    choice = chosen(by_setting, allowed)
    cases = len(next(iter(by_setting.values())))
    # The encoder alone, the quality tables' hybrid and re-ranking (the category catalogs' option),
    # the library's default and the rule's choice.
    heavy = (TABLE_TFIDF_WEIGHT, TABLE_NEIGHBOURS, TABLE_NEIGHBOUR_WEIGHT, METRIC_INF)
    shown = list(dict.fromkeys([ALONE, heavy, (TABLE_TFIDF_WEIGHT, 0, 0.0, METRIC_INF), current(), choice]))
    print(
        f"Dev judgments; gain over the encoder alone, mean and smallest over {cases} (benchmark, view, encoder) "
        f"cases, and how many (case, metric) pairs each setting harms beyond the noise allowance; produced by "
        f"`{COMMAND}`:\n\n{table(by_setting, allowed)}\n\nBy benchmark:\n\n"
        f"{benchmark_table(by_setting, allowed, shown)}\n\nThe expert-graded pools, pool by pool:\n\n"
        f"{paired_pools_table(rows, shown)}\n\nChosen: {describe(choice)} "
        f"(the library's defaults: {describe(current())})."
    )


if __name__ == "__main__":
    main()
