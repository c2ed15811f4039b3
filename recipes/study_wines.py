"""The quality study: train named variants of the wines recipe and rank each against the annotations.

    python recipes/study_wines.py                          # every variant of recipes/wines/study.yaml
    python recipes/study_wines.py --only random_other_field --seeds 42 7
    python recipes/study_wines.py --report                  # rewrite the table from the results file

Each run appends one JSON line (variant, seed, overrides, metrics, loss terms, wall time) to the
results file, so an interrupted study resumes where it stopped and every figure in
docs/quality.md can be traced to a line of it. The zero-shot start is a variant with no training.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from pathlib import Path

import yaml
from transformers import AutoTokenizer

from metricbert_trainer.arguments import parse_recipe_args
from metricbert_trainer.config import DataArguments, MetricBertConfig, ModelArguments
from metricbert_trainer.modeling import load_masked_lm, resolve_model_name
from metricbert_trainer.recipe import build_ranking_evaluator, load_recipe_catalog, train

HERE = Path(__file__).parent
METRICS = ("mpr", "mrr", "hr@10", "hr@100")
LOGGED_TERMS = (
    "mlm_loss",
    "triplet_loss",
    "negative_closer_rate",
    "mean_d_ap",
    "mean_d_an",
    "embedding_spread",
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--study", default=str(HERE / "wines" / "study.yaml"))
    parser.add_argument("--results", default="docs/quality_results.jsonl")
    parser.add_argument("--only", nargs="+", help="Run these variants only.")
    parser.add_argument("--seeds", nargs="+", type=int, default=[42])
    parser.add_argument(
        "--report", action="store_true", help="Print the markdown table of the results and exit."
    )
    options = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    study = yaml.safe_load(Path(options.study).read_text(encoding="utf-8"))
    results_path = Path(options.results)
    if options.report:
        print(markdown_table(read_results(results_path), study["variants"]))
        return
    done = {(row["variant"], row["seed"]) for row in read_results(results_path)}
    for name in options.only or list(study["variants"]):
        if name not in study["variants"]:
            raise SystemExit(f"Unknown variant {name!r}; the study defines {sorted(study['variants'])}.")
        for seed in options.seeds if name != "zero_shot" else [0]:
            if (name, seed) in done:
                continue
            row = run_variant(study["base_config"], name, study["variants"][name] or {}, seed)
            with open(results_path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(row) + "\n")
            print(
                json.dumps({key: row[key] for key in ("variant", "seed", "metrics", "seconds")}), flush=True
            )


def run_variant(base_config: str, name: str, overrides: dict, seed: int) -> dict:
    started = time.time()
    with tempfile.TemporaryDirectory() as output_dir:
        flags = [
            "--output_dir",
            output_dir,
            "--seed",
            str(seed),
            "--save_strategy",
            "no",
            "--disable_tqdm",
            "true",
        ]
        for key, value in overrides.items():
            flags += [f"--{key}", *(map(str, value) if isinstance(value, list) else [str(value)])]
        model_args, data_args, training_args = parse_recipe_args(
            (ModelArguments, DataArguments, MetricBertConfig), flags, default_config=base_config
        )
        if name == "zero_shot":
            metrics, terms = evaluate_untrained(model_args, data_args, training_args), {}
        else:
            run = train(model_args, data_args, training_args)
            metrics, terms = run.metrics, first_and_last_terms(run.trainer.state.log_history)
    return {
        "variant": name,
        "seed": seed,
        "overrides": overrides,
        "metrics": {
            key.removeprefix("eval_"): value for key, value in metrics.items() if key.startswith("eval_")
        },
        "terms": terms,
        "seconds": round(time.time() - started, 1),
    }


def evaluate_untrained(
    model_args: ModelArguments, data_args: DataArguments, training_args: MetricBertConfig
) -> dict[str, float]:
    evaluator = build_ranking_evaluator(data_args, training_args, load_recipe_catalog(data_args))
    path = resolve_model_name(model_args.model_name_or_path)
    metrics = evaluator(load_masked_lm(path), AutoTokenizer.from_pretrained(path))
    return {f"eval_{key}": value for key, value in metrics.items()}


def first_and_last_terms(log_history: list[dict]) -> dict[str, list[float]]:
    entries = [entry for entry in log_history if "triplet_loss" in entry]
    return {
        term: [entries[0][term], entries[-1][term]] for term in LOGGED_TERMS if entries and term in entries[0]
    }


def read_results(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def markdown_table(rows: list[dict], variants: dict) -> str:
    """One line per variant: mean (and spread over seeds) of each filtered metric."""
    lines = [
        "| variant | seeds | " + " | ".join(metric.upper() for metric in METRICS) + " | what changes |",
        "|---|---|" + "---|" * len(METRICS) + "---|",
    ]
    for name in variants:
        runs = [row for row in rows if row["variant"] == name]
        if not runs:
            continue
        cells = []
        for metric in METRICS:
            values = [row["metrics"][metric] for row in runs]
            mean = sum(values) / len(values)
            cells.append(
                f"{mean:.1f}" + (f" ± {(max(values) - min(values)) / 2:.1f}" if len(values) > 1 else "")
            )
        change = ", ".join(f"{key}={value}" for key, value in (variants[name] or {}).items()) or "-"
        lines.append(f"| {name} | {len(runs)} | " + " | ".join(cells) + f" | {change} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
