"""The multi-task NER study: NER alone against NER + a title/description term, over several seeds.

Reproduces the comparison of Siskind & Shah on the wine titles (docs/multitask_ner.md): each
variant is ``recipes/wines/ner.yaml`` with its own flags, trained once per seed and evaluated on
the held-out titles. Every finished run is appended to ``--results`` as one JSON line, and runs
already there are skipped, so an interrupted study resumes; ``--table`` prints the mean and
standard deviation of each metric per variant from that file, and trains nothing.

A *regime* says which titles train, choose the checkpoint and are reported on
(``data/wines_ner/build_tags.py`` writes the split columns): ``recipe split`` is the recipe's
70/30 split, the last epoch reported (the table README.md quotes); the others choose the
checkpoint on 10% validation titles and report on the 30% test titles: ``random``, the same test
titles; ``winery-disjoint`` and ``variety-disjoint``, test titles whose winery, or variety, never
occurs in training; ``random, N titles``, the random split trained on its first N titles only.

    OMP_NUM_THREADS=1 python recipes/ner/study.py --results docs/results/multitask_ner.jsonl
    python recipes/ner/study.py --results docs/results/multitask_ner.jsonl --regimes winery-disjoint --variants ner ner+logistic_triplet
    python recipes/ner/study.py --results docs/results/multitask_ner.jsonl --table
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from metricbert_trainer.ner.metrics import METRIC_NAMES
from metricbert_trainer.publishing.markdown import markdown_table
from metricbert_trainer.scripts.ner import main as train_ner

CONFIG = Path(__file__).resolve().parents[1] / "wines" / "ner.yaml"
# Each variant's flags over the recipe's YAML.
VARIANTS = {
    "ner": ["--metric_weight", "0"],
    "ner+logistic_triplet": ["--metric_weight", "1", "--objective", "logistic_triplet"],
    "ner+contrastive": ["--metric_weight", "1", "--objective", "contrastive"],
}
SEEDS = (1, 2, 3)
RECIPE_SPLIT = "recipe split"
# The recipe's split evaluates once per epoch and keeps no checkpoint: the last epoch is reported.
RUN_FLAGS = ["--save_strategy", "no", "--load_best_model_at_end", "false", "--eval_strategy", "epoch"]
# The other regimes keep the best epoch on the validation titles (the recipe's metric_for_best_model).
SELECTED = [
    "--save_strategy",
    "epoch",
    "--save_total_limit",
    "1",
    "--load_best_model_at_end",
    "true",
    "--eval_strategy",
    "epoch",
]
REGIMES = {
    RECIPE_SPLIT: RUN_FLAGS,
    "random": ["--split_column", "split_random", *SELECTED],
    "winery-disjoint": ["--split_column", "split_winery", *SELECTED],
    "variety-disjoint": ["--split_column", "split_variety", *SELECTED],
    "random, 500 titles": ["--split_column", "split_random", "--max_train_items", "500", *SELECTED],
    "random, 100 titles": ["--split_column", "split_random", "--max_train_items", "100", *SELECTED],
}


def finished_runs(results: Path) -> list[dict]:
    if not results.exists():
        return []
    return [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines() if line.strip()]


def regime(run: dict) -> str:
    """A finished run's regime (runs recorded before regimes existed used the recipe's split)."""
    return run.get("regime", RECIPE_SPLIT)


def run_study(
    results: Path, output_root: Path, regimes: list[str], variants: list[str], seeds: list[int]
) -> None:
    done = {(regime(run), run["variant"], run["seed"]) for run in finished_runs(results)}
    for name in regimes:
        for seed in seeds:
            for variant in variants:
                if (name, variant, seed) in done:
                    continue
                folder = f"{name}-{variant}-seed{seed}".replace("+", "-").replace(", ", "-").replace(" ", "-")
                flags = [
                    *VARIANTS[variant],
                    "--seed",
                    str(seed),
                    "--output_dir",
                    str(output_root / folder),
                    # The study's own folder: one an interrupted study left is replaced.
                    "--overwrite_output_dir",
                    "true",
                    *REGIMES[name],
                ]
                run = train_ner(flags, default_config=CONFIG)
                state = run.trainer.state
                record = {
                    "regime": name,
                    "variant": variant,
                    "seed": seed,
                    "flags": flags,
                    "metrics": {metric: round(run.metrics[f"eval_{metric}"], 4) for metric in METRIC_NAMES},
                    # Every evaluation's F1: each epoch's (the validation titles' where the regime has
                    # them), then the final test evaluation.
                    "per_evaluation_f1": [
                        round(entry["eval_f1"], 4) for entry in state.log_history if "eval_f1" in entry
                    ],
                    "train_runtime_s": round(
                        next(e["train_runtime"] for e in state.log_history if "train_runtime" in e), 1
                    ),
                }
                results.parent.mkdir(parents=True, exist_ok=True)
                with open(results, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps(record) + "\n")


def summary_table(runs: list[dict]) -> str:
    """Markdown: per regime and variant, each metric's mean ± standard deviation over its seeds, in %."""
    rows = []
    for name in REGIMES:
        for variant in VARIANTS:
            chosen = [run for run in runs if regime(run) == name and run["variant"] == variant]
            if not chosen:
                continue
            cells = []
            for metric in METRIC_NAMES:
                values = [run["metrics"][metric] for run in chosen]
                spread = statistics.stdev(values) if len(values) > 1 else 0.0
                cells.append(f"{statistics.mean(values):.2f} ± {spread:.2f}")
            rows.append([name, variant, len(chosen), *cells])
    return markdown_table(["regime", "variant", "seeds", *METRIC_NAMES], rows, align="lllrrrrr")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, required=True, help="The JSON-lines file of finished runs.")
    parser.add_argument("--output_root", type=Path, default=Path("outputs/ner-study"))
    parser.add_argument("--regimes", nargs="+", default=[RECIPE_SPLIT], choices=list(REGIMES))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS))
    parser.add_argument("--table", action="store_true", help="Print the summary table of --results and stop.")
    args = parser.parse_args()
    if not args.table:
        run_study(args.results, args.output_root, args.regimes, args.variants, args.seeds)
    print(summary_table(finished_runs(args.results)))


if __name__ == "__main__":
    main()
