"""A lever read against the default with all of its training seeds, on every domain, by the rule
of its confirmation.

    python benchmarks/lever_confirmation.py --variant "attention dropout off"              # dev seeds: the rule
    python benchmarks/lever_confirmation.py --variant "attention dropout off" --split test # the report

A lever that passed its one-seed screen earns training seeds 2-3; the rule for those (written in
the variant's comment in ``benchmarks/levers.yaml`` before any of their rows is read) compares
3-seed means in the default ranking: in each (domain, view) case, each metric of ``--ruled`` is no
lower than the default's mean minus the larger of ``--floor`` and ``--spreads`` times the default's
3-seed spread there. This prints, for each case, the variant's mean ± spread / the default's: the
difference, and on the dev seeds the allowance in brackets (bold when the difference is below it),
from the results files the quality tables' command wrote: each pair is a study's results file (the
variant's rows) and its base's (the default's rows). It trains and ranks nothing.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from metricbert_trainer.scripts.quality_tables import TRAINED, read_rows, reranked

# (the variant's results, the default's), by the benchmark files of benchmarks/levers.yaml and
# benchmarks/held_out_levers.yaml.
RESULT_PAIRS = (
    ("docs/results/levers.jsonl", "docs/results/quality_tables.jsonl"),
    ("docs/results/held_out_levers.jsonl", "docs/results/held_out.jsonl"),
)
COLUMNS = {"mpr": "MPR", "map": "MAP", "ndcg@20": "NDCG@20", "hr@100": "HR@100"}
RULED = ("mpr", "map", "ndcg@20")
VIEWS = ("plain", "masked")


def seed_values(
    rows: list[dict], model: str, benchmark: str, view: str, split: str, metric: str
) -> list[float]:
    """The metric of each training seed's row, in seed order (the last row of a seed counts)."""
    by_seed = {
        row["train_seed"]: row["metrics"][metric]
        for row in rows
        if (row["model"], row["benchmark"], row["view"], row["split"]) == (model, benchmark, view, split)
    }
    return [by_seed[seed] for seed in sorted(by_seed)]


def reading(options: argparse.Namespace) -> tuple[list[str], bool]:
    """The table's lines, and whether every ruled cell of every case is inside its allowance."""
    ruled = options.split == "dev"
    lines = [
        "| benchmark | view | " + " | ".join(COLUMNS.values()) + " |",
        "|---|---|" + "---:|" * len(COLUMNS),
    ]
    passed = True
    for variant_results, default_results in options.pairs:
        variant_rows, default_rows = read_rows(Path(variant_results)), read_rows(Path(default_results))
        benchmarks = dict.fromkeys(
            row["benchmark"] for row in variant_rows if row["model"] == options.variant
        )
        for benchmark in benchmarks:
            for view in VIEWS:
                cells = []
                for metric in COLUMNS:
                    key = (benchmark, view, options.split, metric)
                    variant = seed_values(variant_rows, reranked(options.variant), *key)
                    default = seed_values(default_rows, reranked(TRAINED), *key)
                    if len(variant) < 2 or len(variant) != len(default):
                        raise SystemExit(
                            f"{benchmark} {view}: {len(variant)} training seeds of {options.variant!r} "
                            f"against the default's {len(default)}; the rule reads the same seeds, at least 2."
                        )
                    difference = statistics.mean(variant) - statistics.mean(default)
                    cell = (
                        f"{statistics.mean(variant):.2f} ± {statistics.stdev(variant):.2f} / "
                        f"{statistics.mean(default):.2f} ± {statistics.stdev(default):.2f}: {difference:+.2f}"
                    )
                    if ruled and metric in options.ruled:
                        allowance = max(options.floor, options.spreads * statistics.stdev(default))
                        cell += f" ({allowance:.2f})"
                        if difference < -allowance:
                            cell, passed = f"**{cell}**", False
                    cells.append(cell)
                lines.append(f"| {benchmark} | {view} | " + " | ".join(cells) + " |")
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
    parser.add_argument("--ruled", nargs="+", default=list(RULED), choices=list(COLUMNS))
    parser.add_argument("--floor", type=float, default=0.10, help="The smallest allowance.")
    parser.add_argument("--spreads", type=float, default=2.0, help="The allowance in the default's spreads.")
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
