"""Controlled comparisons of training variants: the quality study and the loss ablation.

A study is a YAML file: a ``base_config`` recipe, ``shared`` overrides every variant gets (the
budget), and named ``variants``, each a set of overrides. Every run appends one JSON line
(variant, seed, overrides, metrics, first and last logged loss terms, wall time) to a results
file, so an interrupted study resumes where it stopped and every reported figure traces back to
a line. A variant named ``zero_shot`` is the starting model, ranked without training.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from transformers import AutoTokenizer

from .arguments import parse_recipe_args
from .config import DataArguments, MetricBertConfig, ModelArguments
from .modeling import load_masked_lm, resolve_model_name
from .recipe import build_ranking_evaluator, load_recipe_catalog, train

METRICS = ("mpr", "mrr", "hr@10", "hr@100")
ZERO_SHOT = "zero_shot"
LOGGED_STATISTICS = ("negative_closer_rate", "mean_d_ap", "mean_d_an", "embedding_spread")


@dataclass
class Study:
    """A study file: the recipe every variant starts from and what each variant changes."""

    base_config: str
    variants: dict[str, dict]
    shared: dict = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_yaml(cls, path: str | Path) -> Study:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        unknown = set(data) - {"base_config", "variants", "shared", "labels"}
        if unknown:
            raise ValueError(f"{path}: unknown study keys {sorted(unknown)}.")
        variants = {name: overrides or {} for name, overrides in data["variants"].items()}
        return cls(data["base_config"], variants, data.get("shared") or {}, data.get("labels") or {})

    def label(self, name: str) -> str:
        return self.labels.get(name, name)


def run_study(study: Study, names: list[str], seeds: list[int], results_path: Path) -> None:
    """Trains and ranks each (variant, seed) not yet in the results file."""
    for name in names:
        if name not in study.variants:
            raise SystemExit(f"Unknown variant {name!r}; the study defines {sorted(study.variants)}.")
    done = {(row["variant"], row["seed"]) for row in read_results(results_path)}
    for name in names:
        for seed in seeds if name != ZERO_SHOT else [0]:
            if (name, seed) in done:
                continue
            row = run_variant(study, name, seed)
            with open(results_path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(row) + "\n")
            print(
                json.dumps({key: row[key] for key in ("variant", "seed", "metrics", "seconds")}), flush=True
            )


def run_variant(study: Study, name: str, seed: int) -> dict:
    started = time.time()
    overrides = {**study.shared, **study.variants[name]}
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
            (ModelArguments, DataArguments, MetricBertConfig), flags, default_config=study.base_config
        )
        if name == ZERO_SHOT:
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
    """The loss terms and mining statistics at the first and the last logging step."""
    entries = [entry for entry in log_history if "mlm_loss" in entry]
    if not entries:
        return {}
    names = [key for key in entries[0] if key.endswith("_loss") or key in LOGGED_STATISTICS]
    return {name: [entries[0][name], entries[-1][name]] for name in names}


def read_results(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def summarise(rows: list[dict], study: Study) -> list[dict]:
    """Per variant, in study order: the mean of each metric over seeds, the seed-to-seed range
    (max - min) and the per-seed values."""
    summary = []
    for name in study.variants:
        runs = [row for row in rows if row["variant"] == name]
        if not runs:
            continue
        values = {metric: [row["metrics"][metric] for row in runs] for metric in METRICS}
        summary.append(
            {
                "variant": name,
                "label": study.label(name),
                "seeds": [row["seed"] for row in runs],
                "overrides": study.variants[name],
                "mean": {metric: sum(v) / len(v) for metric, v in values.items()},
                "range": {metric: max(v) - min(v) for metric, v in values.items()},
                "per_seed": values,
            }
        )
    return summary


def seed_noise(summary: list[dict]) -> dict[str, float]:
    """The largest seed-to-seed range of each metric among variants run with several seeds."""
    repeated = [entry for entry in summary if len(entry["seeds"]) > 1]
    return {metric: max((entry["range"][metric] for entry in repeated), default=0.0) for metric in METRICS}


def markdown_table(summary: list[dict], reference: str | None = None) -> str:
    """One row per variant. With a ``reference`` variant, each mean carries its difference from
    the reference, starred where it exceeds the largest seed-to-seed range of the study."""
    noise = seed_noise(summary)
    by_name = {entry["variant"]: entry for entry in summary}
    baseline = by_name.get(reference)
    lines = [
        "| variant | seeds | " + " | ".join(metric.upper() for metric in METRICS) + " | what changes |",
        "|---|---|" + "---|" * len(METRICS) + "---|",
    ]
    for entry in summary:
        cells = []
        for metric in METRICS:
            cell = f"{entry['mean'][metric]:.2f}"
            if len(entry["seeds"]) > 1:
                cell += f" (range {entry['range'][metric]:.2f})"
            if baseline is not None and entry is not baseline:
                difference = entry["mean"][metric] - baseline["mean"][metric]
                star = "*" if noise[metric] > 0 and abs(difference) > noise[metric] else ""
                cell += f" [{difference:+.2f}{star}]"
            cells.append(cell)
        change = ", ".join(f"{key}={value}" for key, value in entry["overrides"].items()) or "-"
        lines.append(f"| {entry['label']} | {len(entry['seeds'])} | " + " | ".join(cells) + f" | {change} |")
    return "\n".join(lines)


def study_main(description: str, default_study: Path, default_results: Path) -> None:
    """The command line shared by the study scripts under ``recipes/``."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--study", default=str(default_study), help="The study YAML.")
    parser.add_argument("--results", default=str(default_results), help="JSON-lines results file (appended).")
    parser.add_argument("--only", nargs="+", help="Run these variants only.")
    parser.add_argument("--seeds", nargs="+", type=int, default=[42])
    parser.add_argument(
        "--report", action="store_true", help="Print the markdown table of the results and exit."
    )
    parser.add_argument("--reference", help="With --report: the variant the others are compared with.")
    parser.add_argument("--json", help="With --report: also write the summary as JSON to this file.")
    options = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    study = Study.from_yaml(options.study)
    results_path = Path(options.results)
    if options.report:
        summary = summarise(read_results(results_path), study)
        print(markdown_table(summary, options.reference))
        if options.json:
            report = {"noise": seed_noise(summary), "reference": options.reference, "variants": summary}
            Path(options.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        return
    run_study(study, options.only or list(study.variants), options.seeds, results_path)
