"""A lever read against the default on every domain, by the rule of its screen or of its confirmation.

    python studies/lever_reading.py --variant "attention dropout off"               # dev seeds: the rule
    python studies/lever_reading.py --variant "attention dropout off" --split test  # the report
    python studies/lever_reading.py --variant "mnrl objective" --train-seeds 1 --gains 3  # a screen

Graded-pool benchmarks (CSFCube: rows with ``per_pool``, no MPR) are read in a table of their own,
ranked by the encoder alone and as evaluate ranks by default: MAP and NDCG%20 against the same
allowance, and the pools' paired AP differences with the Wilcoxon signed-rank test's two-sided p
(scipy); a ruled reading fails there too if that p is below 0.05 with the variant lower. A lever
meant to move the expert judgments (``--pool-gain``) must also rank the pools by the encoder alone
above the default's MAP by more than ``--spreads`` times the default's spread there (the rule of
the teachers screened for issue #88 item 3).

A lever's rule is written in its variant's comment in ``studies/levers.yaml`` before any of its
rows is read. A screen compares one training seed with the default's same seed (``--train-seeds
1``); a confirmation compares the means over every training seed both have (at least 2). Either
way, in the default ranking, in each (domain, view) case each metric of ``--ruled`` must be no
lower than the default's minus the larger of ``--floor`` and ``--spreads`` times the default's
spread over all its training seeds there; a lever meant to gain (``--gains K``) must also be above
the default by more than that spread in a metric of ``--gained`` in at least K cases. This prints,
for each case, the variant's value (mean ± spread) / the default's: the difference, and on the dev
seeds the allowance in brackets (bold when the difference is below it), from the results files the
quality tables' command wrote: each pair is a study's results file (the variant's rows) and its
base's (the default's rows). It trains and ranks nothing.

The default ranking is today's (``quality_tables.DEFAULT_RANKING``: TF-IDF 0.3 over the joined fields,
20 shared neighbours at 0.25). Screens read before 2026-12-06 were read, as their rules said, in
the default of their day (TF-IDF 0.3 per field, 50 shared neighbours at 0.5):
``--category-ranking until-2026-12-06`` reads them so again. The three teachers of issue #88 item 3
(2026-12-07) were read that way too by mistake; docs/quality.md gives both readings.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from pathlib import Path

from quality_tables import (
    DEFAULT_RANKING,
    TRAINED,
    cell,
    read_rows,
    reranked,
    summarise,
)
from scipy.stats import wilcoxon

# (the variant's results, the default's), by the benchmark files of studies/levers.yaml and
# studies/held_out_levers.yaml.
RESULT_PAIRS = (
    ("docs/results/levers.jsonl", "docs/results/quality_tables.jsonl"),
    ("docs/results/held_out_levers.jsonl", "docs/results/held_out.jsonl"),
)
COLUMNS = {"mpr": "MPR", "map": "MAP", "ndcg@20": "NDCG@20", "hr@100": "HR@100"}
RULED = ("mpr", "map", "ndcg@20")
GAINED = ("map", "ndcg@20")
VIEWS = ("plain", "masked")
POOL_COLUMNS = {"map": "MAP", "ndcg%20": "NDCG%20"}
POOL_P_VALUE = 0.05
# How a category benchmark's rows are named in the ranking the rule reads: today's default, the
# default until 2026-12-06 (the hybrid re-ranked by 50 shared neighbours), which older screens read,
# or the encoder alone (what training changes, before any fusion).
CATEGORY_RANKINGS = {
    "default": lambda model: f"{model}{DEFAULT_RANKING}",
    "until-2026-12-06": reranked,
    "alone": lambda model: model,
}


def of_seeds(rows: list[dict], train_seeds: Sequence[int] | None) -> list[dict]:
    """The rows of these training seeds (every row when None)."""
    return rows if train_seeds is None else [row for row in rows if row.get("train_seed") in train_seeds]


def read(options: argparse.Namespace, benchmark: str) -> bool:
    """Whether the reading reads ``benchmark`` (``--only``; every benchmark by default)."""
    return options.only is None or benchmark in options.only


def compared_seeds(case: str, seeds: int, default_seeds: int, train_seeds: Sequence[int] | None) -> None:
    """Refuses a case whose two sides hold different numbers of training seeds, or too few to read."""
    wanted = len(train_seeds) if train_seeds is not None else max(seeds, 2)
    if seeds != wanted or default_seeds != wanted:
        raise SystemExit(
            f"{case}: {seeds} training seeds of the variant against the default's {default_seeds}; "
            + (
                f"the screen reads seeds {list(train_seeds)} of both."
                if train_seeds
                else "the rule reads the same seeds, at least 2."
            )
        )


def reading(options: argparse.Namespace) -> tuple[list[str], bool]:
    """The table's lines, and whether the rule passes: every ruled cell of every case inside its
    allowance, and at least ``options.gains`` cases above the default's spread."""
    ruled = options.split == "dev"
    counting_gains = ruled and options.gains > 0
    lines = [
        "| benchmark | view | "
        + " | ".join(COLUMNS.values())
        + (" | above the default's spread |" if counting_gains else " |"),
        "|---|---|" + "---:|" * len(COLUMNS) + ("---|" if counting_gains else ""),
    ]
    passed, gained_cases, pool_lines = True, 0, []
    ranked = CATEGORY_RANKINGS[options.category_ranking]
    variant_name, default_name = ranked(options.variant), ranked(TRAINED)
    for variant_results, default_results in options.pairs:
        # (benchmark, split, view, model) -> metric -> the values over training seeds.
        variant_rows = of_seeds(read_rows(Path(variant_results)), options.train_seeds)
        variants = summarise(variant_rows, trained=())
        # The spreads are over every training seed of the default; a screen reads its side of the
        # default from the screened seeds alone, a confirmation from every seed (the same summary).
        default_rows = read_rows(Path(default_results))
        spreads_over = summarise(default_rows, trained=())
        defaults = spreads_over
        if options.train_seeds is not None:
            defaults = summarise(of_seeds(default_rows, options.train_seeds), trained=())
        benchmarks = dict.fromkeys(
            benchmark
            for (benchmark, _, _, model), metrics in variants.items()
            if model == variant_name and "mpr" in metrics and read(options, benchmark)
        )
        for benchmark in benchmarks:
            for view in VIEWS:
                variant = variants.get((benchmark, options.split, view, variant_name), {})
                default = defaults.get((benchmark, options.split, view, default_name), {})
                compared_seeds(
                    f"{benchmark} {view}",
                    len(variant.get("mpr", [])),
                    len(default.get("mpr", [])),
                    options.train_seeds,
                )
                # The spreads of the ranking read, or of the encoder alone where the default has fewer
                # seeds ranked the other way (--spreads-of alone).
                spread_name = TRAINED if options.spreads_of == "alone" else default_name
                all_seeds = spreads_over[(benchmark, options.split, view, spread_name)]
                if len(all_seeds["mpr"]) < 2:
                    raise SystemExit(
                        f"{benchmark} {view}: the default has {len(all_seeds['mpr'])} training seed ranked as "
                        f"{spread_name!r}, too few for a spread; --spreads-of alone takes the encoder alone's."
                    )
                cells, above = [], []
                for metric in COLUMNS:
                    difference = statistics.mean(variant[metric]) - statistics.mean(default[metric])
                    text = f"{cell(variant[metric])} / {cell(default[metric])}: {difference:+.2f}"
                    spread = statistics.stdev(all_seeds[metric])
                    if ruled and metric in options.ruled:
                        allowance = max(options.floor, options.spreads * spread)
                        text += f" ({allowance:.2f})"
                        if difference < -allowance:
                            text, passed = f"**{text}**", False
                    if metric in options.gained and difference > spread:
                        above.append(COLUMNS[metric])
                    cells.append(text)
                gained_cases += bool(above)
                if counting_gains:
                    cells.append(", ".join(above) or "-")
                lines.append(f"| {benchmark} | {view} | " + " | ".join(cells) + " |")
        lines_of_pair, pair_passed = pool_reading(options, variant_rows, default_rows)
        pool_lines += lines_of_pair
        passed = passed and pair_passed
    if len(lines) == 2:  # the header alone: no category benchmark read
        if not pool_lines:
            raise SystemExit(f"No rows of {options.variant!r} in the results files: {options.pairs}.")
        lines = []
    if pool_lines:
        lines += [
            *([""] if lines else []),
            "| benchmark | ranking | "
            + " | ".join(POOL_COLUMNS.values())
            + " | pools' AP up / down, Wilcoxon p |",
            "|---|---|" + "---:|" * len(POOL_COLUMNS) + "---|",
            *pool_lines,
        ]
    if counting_gains:
        lines.append(f"\ncases above the default's spread: {gained_cases} (the rule asks {options.gains})")
        passed = passed and gained_cases >= options.gains
    return lines, passed


def rows_of(rows: list[dict], benchmark: str, split: str, model: str) -> list[dict]:
    """The rows of one benchmark, split and model (one per training seed)."""
    return [
        row for row in rows if (row["benchmark"], row["split"], row["model"]) == (benchmark, split, model)
    ]


def paired_pools(differences: Sequence[float]) -> tuple[int, int, float, bool]:
    """Per-pool differences (one ranking's value minus another's): the pools up, the pools down, the
    Wilcoxon signed-rank test's two-sided p over the pools that changed (1 when none did), and
    whether the first ranking is lower by it (p below ``POOL_P_VALUE`` with a negative mean)."""
    changed = [difference for difference in differences if difference != 0]
    p_value = wilcoxon(changed).pvalue if changed else 1.0
    lower = p_value < POOL_P_VALUE and statistics.mean(differences) < 0
    return sum(d > 0 for d in changed), sum(d < 0 for d in changed), p_value, lower


def pool_reading(
    options: argparse.Namespace, variant_rows: list[dict], default_rows: list[dict]
) -> tuple[list[str], bool]:
    """The rows of the graded-pool benchmarks (those whose rows keep ``per_pool``), ranked by the
    encoder alone and as evaluate ranks by default, and whether they pass the rule; ``variant_rows``
    hold the seeds read, ``default_rows`` every seed of the default."""
    ruled = options.split == "dev"
    rankings = {
        "encoder alone": (options.variant, TRAINED),
        "as evaluate ranks by default": (
            f"{options.variant}{DEFAULT_RANKING}",
            f"{TRAINED}{DEFAULT_RANKING}",
        ),
    }
    lines, passed = [], True
    pool_benchmarks = dict.fromkeys(
        row["benchmark"]
        for row in variant_rows
        if "per_pool" in row
        and row["split"] == options.split
        and row["model"] == options.variant
        and read(options, row["benchmark"])
    )
    for benchmark in pool_benchmarks:
        for ranking, (variant_name, default_name) in rankings.items():
            variant = rows_of(variant_rows, benchmark, options.split, variant_name)
            every_default = rows_of(default_rows, benchmark, options.split, default_name)
            default = of_seeds(every_default, options.train_seeds)
            compared_seeds(f"{benchmark} {ranking}", len(variant), len(default), options.train_seeds)
            cells = []
            for metric in POOL_COLUMNS:
                values = [row["metrics"][metric] for row in variant]
                default_values = [row["metrics"][metric] for row in default]
                difference = statistics.mean(values) - statistics.mean(default_values)
                text = f"{cell(values)} / {cell(default_values)}: {difference:+.2f}"
                if ruled:
                    spread = statistics.stdev(row["metrics"][metric] for row in every_default)
                    allowance = max(options.floor, options.spreads * spread)
                    text += f" ({allowance:.2f})"
                    if difference < -allowance:
                        text, passed = f"**{text}**", False
                    elif options.pool_gain and (ranking, metric) == ("encoder alone", "map"):
                        needed = options.spreads * spread
                        text += f", a gain above {needed:.2f}"
                        if difference <= needed:
                            text, passed = f"**{text}**", False
                cells.append(text)
            # Each pool's AP, averaged over the seeds read, the variant's minus the default's.
            per_pool = [
                statistics.mean(pools) - statistics.mean(default_pools)
                for pools, default_pools in zip(
                    zip(*(row["per_pool"]["map"] for row in variant), strict=True),
                    zip(*(row["per_pool"]["map"] for row in default), strict=True),
                    strict=True,
                )
            ]
            up, down, p_value, lower = paired_pools(per_pool)
            text = f"{up} / {down}, p = {p_value:.2f}"
            if ruled and lower:
                text, passed = f"**{text}**", False
            cells.append(text)
            lines.append(f"| {benchmark} | {ranking} | " + " | ".join(cells) + " |")
    return lines, passed


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", required=True, help="The variant's name in the benchmark files.")
    parser.add_argument("--split", choices=["dev", "test"], default="dev", help="test: the report, no rule.")
    parser.add_argument(
        "--pairs",
        nargs=2,
        action="append",
        metavar=("VARIANT_RESULTS", "DEFAULT_RESULTS"),
        help="A study's results file and its base's (repeatable; default: the levers' and the held-out levers').",
    )
    parser.add_argument(
        "--train-seeds",
        type=int,
        nargs="+",
        help="A screen: these training seeds of the variant against the same of the default "
        "(default: the means over every seed, a confirmation).",
    )
    parser.add_argument(
        "--category-ranking",
        choices=list(CATEGORY_RANKINGS),
        default="default",
        help="The ranking the category benchmarks are read in: today's default, or the default until "
        "2026-12-06 (TF-IDF 0.3 per field, 50 shared neighbours at 0.5), which older screens read.",
    )
    parser.add_argument(
        "--spreads-of",
        choices=["ranking", "alone"],
        default="ranking",
        help="Whose spreads over the default's training seeds set the allowances: the ranking read's, or "
        "the encoder alone's (where the default has fewer seeds ranked as read, as PyPI's in today's default).",
    )
    parser.add_argument(
        "--only", nargs="+", help="These benchmarks only (default: every one the variant has)."
    )
    parser.add_argument("--ruled", nargs="+", default=list(RULED), choices=list(COLUMNS))
    parser.add_argument("--floor", type=float, default=0.10, help="The smallest allowance.")
    parser.add_argument("--spreads", type=float, default=2.0, help="The allowance in the default's spreads.")
    parser.add_argument(
        "--gains",
        type=int,
        default=0,
        help="The cases, at least, in which a metric of --gained is above the default by more than its spread.",
    )
    parser.add_argument("--gained", nargs="+", default=list(GAINED), choices=list(COLUMNS))
    parser.add_argument(
        "--pool-gain",
        action="store_true",
        help="The graded pools ranked by the encoder alone must gain MAP on the default by more than "
        "--spreads times its spread.",
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    options = build_parser().parse_args(argv)
    options.pairs = options.pairs or [list(pair) for pair in RESULT_PAIRS]
    lines, passed = reading(options)
    print("\n".join(lines))
    if options.split == "dev":
        print(f"\nrule: {'passes' if passed else 'fails'}")


if __name__ == "__main__":
    main()
