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

from metricbert_trainer.scripts.quality_tables import TRAINED, cell, read_rows, reranked, summarise

# (the variant's results, the default's), by the benchmark files of benchmarks/levers.yaml and
# benchmarks/held_out_levers.yaml.
RESULT_PAIRS = (
    ("docs/results/levers.jsonl", "docs/results/quality_tables.jsonl"),
    ("docs/results/held_out_levers.jsonl", "docs/results/held_out.jsonl"),
)
COLUMNS = {"mpr": "MPR", "map": "MAP", "ndcg@20": "NDCG@20", "hr@100": "HR@100"}
RULED = ("mpr", "map", "ndcg@20")
VIEWS = ("plain", "masked")


def reading(options: argparse.Namespace) -> tuple[list[str], bool]:
    """The table's lines, and whether every ruled cell of every case is inside its allowance."""
    ruled = options.split == "dev"
    lines = [
        "| benchmark | view | " + " | ".join(COLUMNS.values()) + " |",
        "|---|---|" + "---:|" * len(COLUMNS),
    ]
    passed = True
    variant_name, default_name = reranked(options.variant), reranked(TRAINED)
    for variant_results, default_results in options.pairs:
        # (benchmark, split, view, model) -> metric -> the values over training seeds.
        variants = summarise(read_rows(Path(variant_results)), trained=())
        defaults = summarise(read_rows(Path(default_results)), trained=())
        benchmarks = dict.fromkeys(benchmark for benchmark, _, _, model in variants if model == variant_name)
        for benchmark in benchmarks:
            for view in VIEWS:
                variant = variants.get((benchmark, options.split, view, variant_name), {})
                default = defaults.get((benchmark, options.split, view, default_name), {})
                seeds, default_seeds = len(variant.get("mpr", [])), len(default.get("mpr", []))
                if seeds < 2 or seeds != default_seeds:
                    raise SystemExit(
                        f"{benchmark} {view}: {seeds} training seeds of {options.variant!r} "
                        f"against the default's {default_seeds}; the rule reads the same seeds, at least 2."
                    )
                cells = []
                for metric in COLUMNS:
                    difference = statistics.mean(variant[metric]) - statistics.mean(default[metric])
                    text = f"{cell(variant[metric])} / {cell(default[metric])}: {difference:+.2f}"
                    if ruled and metric in options.ruled:
                        allowance = max(options.floor, options.spreads * statistics.stdev(default[metric]))
                        text += f" ({allowance:.2f})"
                        if difference < -allowance:
                            text, passed = f"**{text}**", False
                    cells.append(text)
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
