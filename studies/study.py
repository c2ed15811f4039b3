"""Controlled comparisons of training variants: the quality study and the loss ablation.

A study is a YAML file: a ``base_config`` recipe, ``shared`` overrides every variant gets (the
budget), and named ``variants``, each a set of overrides; ``family`` names the trainer family
(``metricbert`` by default, or ``recobert``: ``scripts.train.FAMILIES``) and ``results`` the file
its runs go to. Every run appends one JSON line (variant, seed, overrides, metrics, first and
last logged loss terms, every evaluation, wall time) to that file, so an interrupted study
resumes where it stopped and every reported figure traces back to a line. A variant named
``zero_shot`` (or ``zero_shot_<anything>``, e.g. at another ``max_length``) is the starting
model, ranked without training (a ranking family's only). The metrics are the family's own
(its trainer's ``card_method.metrics``: the ranking metrics, or NER's F1 and friends), and the
report gives each mean with its spread over seeds: the range (``spread: range``, the default)
or the standard deviation (``spread: std``).

    python studies/study.py recipes/wines/study.yaml                         # every variant, seed 42
    python studies/study.py recipes/debian/study.yaml --only <variant ...> --seeds 42 7
    python studies/study.py recipes/wines/ablation.yaml --report --reference metricbert --json docs/ablation/table2.json
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import statistics
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from transformers import AutoTokenizer

from metricbert_trainer.base.modeling import load_masked_lm, resolve_model_name
from metricbert_trainer.base.weight_ensembling import blend_with_start
from metricbert_trainer.data.lengths import resolve_max_length
from metricbert_trainer.publishing.markdown import escape_markdown, markdown_table
from metricbert_trainer.scripts.arguments import DataArguments, ModelArguments, parse_recipe_args
from metricbert_trainer.scripts.train import (
    FAMILIES,
    TrainingRun,
    build_ranking_evaluator,
    load_recipe_catalog,
    recipe_family_for,
    train,
)
from metricbert_trainer.training.config import CatalogTrainerConfig

ZERO_SHOT = "zero_shot"
SPREADS = ("range", "std")
# What every variant's run gets unless the study says otherwise: no checkpoints (so none to load
# at the end), no progress bars.
RUN_DEFAULTS = {"save_strategy": "no", "load_best_model_at_end": False, "disable_tqdm": True}
BLEND_OPTION = "trained_weight_share"
LOGGED_STATISTICS = (
    "negative_closer_rate",
    "mean_d_ap",
    "mean_d_an",
    "embedding_spread",
    "distill_anchor_weight",
)


@dataclass
class Study:
    """A study file: the recipe every variant starts from and what each variant changes."""

    base_config: str
    variants: dict[str, dict]
    shared: dict = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    family: str = "metricbert"
    results: str | None = None
    spread: str = "range"

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"Unknown study family {self.family!r}; use one of {sorted(FAMILIES)}.")
        if self.spread not in SPREADS:
            raise ValueError(f"Unknown spread {self.spread!r}; use one of {SPREADS}.")
        untrained = [name for name in self.variants if is_zero_shot(name)]
        if untrained and not self.trainer_class.sentence_encoder:
            raise ValueError(
                f"{untrained[0]}: a zero-shot variant ranks the starting encoder, and the {self.family} family "
                "trains no ranking encoder."
            )

    @classmethod
    def from_yaml(cls, path: str | Path) -> Study:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        # templates: YAML anchors the variants merge (``<<: *name``), read by the YAML parser only.
        known = {"base_config", "variants", "shared", "labels", "family", "results", "spread", "templates"}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"{path}: unknown study keys {sorted(unknown)}.")
        variants = {name: overrides or {} for name, overrides in data["variants"].items()}
        return cls(
            data["base_config"],
            variants,
            data.get("shared") or {},
            data.get("labels") or {},
            **{key: data[key] for key in ("family", "results", "spread") if key in data},
        )

    @property
    def config_class(self) -> type[CatalogTrainerConfig]:
        return FAMILIES[self.family]

    @property
    def trainer_class(self):
        return recipe_family_for(self.config_class).trainer

    @property
    def metrics(self) -> tuple[str, ...]:
        """The metrics the family's evaluation logs, in its card's order."""
        return tuple(self.trainer_class.card_method.metrics)

    def label(self, name: str) -> str:
        return self.labels.get(name, name)


def run_study(study: Study, names: list[str], seeds: list[int], results_path: Path) -> None:
    """Trains and ranks each (variant, seed) not yet in the results file.

    Variants that differ only in ``trained_weight_share`` share one training run: the blend with
    the starting model is applied once training ends (``weight_ensembling``), so each of them is
    the same trained encoder blended at its own share and ranked.
    """
    for name in names:
        if name not in study.variants:
            raise SystemExit(f"Unknown variant {name!r}; the study defines {sorted(study.variants)}.")
    done = {(row["variant"], row["seed"]) for row in read_results(results_path)}
    for group in training_groups(study, names):
        for seed in seeds if not is_zero_shot(group[0]) else [0]:
            todo = [name for name in group if (name, seed) not in done]
            if not todo:
                continue
            for row in run_variants(study, todo, seed):
                with open(results_path, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps(row) + "\n")
                print(
                    json.dumps({key: row[key] for key in ("variant", "seed", "metrics", "seconds")}),
                    flush=True,
                )


def training_groups(study: Study, names: list[str]) -> list[list[str]]:
    """``names`` grouped by the training they need: equal overrides but for ``trained_weight_share``."""
    groups: dict[str, list[str]] = {}
    for name in names:
        overrides = {**study.shared, **study.variants[name]}
        overrides.pop(BLEND_OPTION, None)
        key = name if is_zero_shot(name) else json.dumps(overrides, sort_keys=True, default=str)
        groups.setdefault(key, []).append(name)
    return list(groups.values())


def run_variants(study: Study, names: list[str], seed: int) -> list[dict]:
    """One training run shared by ``names`` (variants that differ only in ``trained_weight_share``),
    and a results row per variant."""
    started = time.time()
    with tempfile.TemporaryDirectory() as folder:
        model_args, data_args, training_args = variant_arguments(study, names[0], seed, Path(folder))
        warmup, terms, evaluations = None, {}, []
        if is_zero_shot(names[0]):
            metrics = {names[0]: evaluate_untrained(model_args, data_args, training_args)}
        else:
            training_args.trained_weight_share = 1.0
            run = train(model_args, data_args, training_args)
            terms = first_and_last_terms(run.trainer.state.log_history)
            evaluations = evaluation_history(run.trainer.state.log_history)
            warmup = getattr(run.trainer, "mlm_head_warmup", None)
            metrics = {name: blended_metrics(run, study.variants[name], model_args) for name in names}
    seconds = round(time.time() - started, 1)
    return [
        {
            "variant": name,
            "seed": seed,
            "overrides": {**study.shared, **study.variants[name]},
            "metrics": {
                key.removeprefix("eval_"): value
                for key, value in metrics[name].items()
                if key.startswith("eval_")
            },
            "terms": terms,
            "evaluations": evaluations,
            "mlm_head_warmup": None
            if warmup is None
            else {"before": warmup.loss_before, "after": warmup.loss_after},
            "trained_with": names,
            "seconds": seconds,
        }
        for name in names
    ]


def blended_metrics(run: TrainingRun, overrides: dict, model_args: ModelArguments) -> dict[str, float]:
    """The run's final metrics for ``trained_weight_share`` 1, else those of its trained encoder
    blended with the starting one at the variant's share."""
    share = overrides.get(BLEND_OPTION, 1.0)
    if share == 1.0:
        return run.metrics
    trainer = run.trainer
    blended = copy.deepcopy(trainer.accelerator.unwrap_model(trainer.model))
    start = load_masked_lm(resolve_model_name(model_args.model_name_or_path)).base_model
    blend_with_start(blended.base_model, start, share)
    ranking = trainer.ranking_evaluator(blended, trainer.processing_class)
    return {f"eval_{name}": value for name, value in ranking.items()}


def variant_arguments(study: Study, name: str, seed: int, folder: Path):
    """The recipe arguments of one variant's run, which writes into ``folder / "run"``.

    The base recipe, ``RUN_DEFAULTS`` and the overrides are merged into one YAML in ``folder``, so
    an override can also unset an option (``max_length: null`` chooses it from the data), which no
    flag can say, or keep checkpoints where the variant chooses one (``load_best_model_at_end``).
    """
    config = yaml.safe_load(Path(study.base_config).read_text(encoding="utf-8")) or {}
    config.update({**RUN_DEFAULTS, **study.shared, **study.variants[name]})
    config_path = folder / "variant.yaml"
    config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
    flags = ["--output_dir", str(folder / "run"), "--seed", str(seed)]
    data_arguments = recipe_family_for(study.config_class).data_arguments
    return parse_recipe_args(
        (ModelArguments, data_arguments, study.config_class), flags, default_config=config_path
    )


def evaluation_history(log_history: list[dict]) -> list[dict]:
    """Every evaluation of a run (step 0 too with ``eval_on_start``): its step and metrics."""
    return [
        {
            "step": entry["step"],
            **{k.removeprefix("eval_"): v for k, v in entry.items() if k.startswith("eval_")},
        }
        for entry in log_history
        if any(key.startswith("eval_") for key in entry)
    ]


def is_zero_shot(name: str) -> bool:
    return name == ZERO_SHOT or name.startswith(f"{ZERO_SHOT}_")


def evaluate_untrained(
    model_args: ModelArguments, data_args: DataArguments, training_args: CatalogTrainerConfig
) -> dict[str, float]:
    catalog = load_recipe_catalog(data_args)
    path = resolve_model_name(model_args.model_name_or_path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    resolve_max_length(training_args, tokenizer, catalog.dataset, catalog.fields)
    evaluator = build_ranking_evaluator(data_args, training_args, catalog)
    metrics = evaluator(load_masked_lm(path), tokenizer)
    return {f"eval_{key}": value for key, value in metrics.items()}


def first_and_last_terms(log_history: list[dict]) -> dict[str, list[float]]:
    """The loss terms, mining statistics and per-term gradient norms (``log_gradient_norms``) at
    the first and the last logging step."""
    # Every entry with a loss term: the training steps' logs and the run's closing summary.
    entries = [entry for entry in log_history if any(is_loss_term(key) for key in entry)]
    if not entries:
        return {}
    names = [
        key
        for key in entries[0]
        if is_loss_term(key) or key.startswith("grad_norm_") or key in LOGGED_STATISTICS
    ]
    # The last logging step, not the run's closing summary (its means carry the loss terms only).
    last = next(entry for entry in reversed(entries) if all(name in entry for name in names))
    return {name: [entries[0][name], last[name]] for name in names}


def is_loss_term(key: str) -> bool:
    """A logged loss term of the objective (``mlm_loss``, ``tagging_loss``, ...), not the
    trainer's total (``train_loss``) or an evaluation's (``eval_loss``)."""
    return key.endswith("_loss") and key != "train_loss" and not key.startswith("eval_")


def read_results(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def summarise(rows: list[dict], study: Study) -> list[dict]:
    """Per variant, in study order: the mean of each of the family's metrics over seeds, the
    seed-to-seed range (max - min), the sample standard deviation and the per-seed values."""
    summary = []
    for name in study.variants:
        runs = [row for row in rows if row["variant"] == name]
        if not runs:
            continue
        # Rows written before a metric existed lack it; it is reported only where every seed has it.
        values = {
            metric: [row["metrics"][metric] for row in runs]
            for metric in study.metrics
            if all(metric in row["metrics"] for row in runs)
        }
        summary.append(
            {
                "variant": name,
                "label": study.label(name),
                "seeds": [row["seed"] for row in runs],
                "overrides": study.variants[name],
                "mean": {metric: sum(v) / len(v) for metric, v in values.items()},
                "range": {metric: max(v) - min(v) for metric, v in values.items()},
                "std": {metric: statistics.stdev(v) if len(v) > 1 else 0.0 for metric, v in values.items()},
                "per_seed": values,
            }
        )
    return summary


def seed_noise(summary: list[dict]) -> dict[str, float]:
    """The largest seed-to-seed range of each metric among variants run with several seeds."""
    repeated = [entry for entry in summary if len(entry["seeds"]) > 1]
    metrics = dict.fromkeys(metric for entry in summary for metric in entry["mean"])
    return {
        metric: max((entry["range"][metric] for entry in repeated if metric in entry["range"]), default=0.0)
        for metric in metrics
    }


def summary_table(
    summary: list[dict],
    reference: str | None = None,
    spread: str = "range",
    names: Mapping[str, str] | None = None,
) -> str:
    """One row per variant: each mean with its spread over seeds (``range`` or ``std``), under the
    metrics' display ``names`` (a family's ``card_method.metrics``; default upper case). With a
    ``reference`` variant, each mean carries its difference from the reference, starred where it
    exceeds the largest seed-to-seed range of the study. A metric no run recorded (the study ran
    before it was measured) gets no column."""
    metrics = list(dict.fromkeys(metric for entry in summary for metric in entry["mean"]))
    noise = seed_noise(summary)
    by_name = {entry["variant"]: entry for entry in summary}
    baseline = by_name.get(reference)
    rows = []
    for entry in summary:
        cells = []
        for metric in metrics:
            if metric not in entry["mean"]:
                cells.append("-")
                continue
            cell = f"{entry['mean'][metric]:.2f}"
            if spread == "std":
                cell += f" ± {entry['std'][metric]:.2f}"
            elif len(entry["seeds"]) > 1:
                cell += f" (range {entry['range'][metric]:.2f})"
            if baseline is not None and entry is not baseline and metric in baseline["mean"]:
                difference = entry["mean"][metric] - baseline["mean"][metric]
                star = "*" if noise[metric] > 0 and abs(difference) > noise[metric] else ""
                cell += f" [{difference:+.2f}{star}]"
            cells.append(cell)
        change = ", ".join(f"{key}={value}" for key, value in entry["overrides"].items()) or "-"
        rows.append([escape_markdown(entry["label"]), len(entry["seeds"]), *cells, change])
    names = names or {}
    headers = ["variant", "seeds", *(names.get(metric, metric.upper()) for metric in metrics), "what changes"]
    return markdown_table(headers, rows)


SELECTION_SIGNALS = ("lf_t2d_mrr", "lf_start_agreement@10")


def selection_table(rows: list[dict], metrics: tuple[str, ...] = ("map", "mpr", "hr@100")) -> str:
    """For every run evaluated more than once: the evaluation each label-free signal picks (its
    maximum) against the start, the last and the best evaluation by the annotations."""
    table = []
    for row in rows:
        evaluations = [entry for entry in row.get("evaluations", []) if "lf_t2d_mrr" in entry]
        if len(evaluations) < 2:
            continue
        choices = {"start": evaluations[0], "last": evaluations[-1]}
        for metric in metrics:
            choices[f"annotations ({metric.upper()}, oracle)"] = max(
                evaluations, key=lambda entry: entry[metric]
            )
        for signal in SELECTION_SIGNALS:
            trained = evaluations[1:] if signal == "lf_start_agreement@10" else evaluations
            choices[signal] = max(trained, key=lambda entry: entry[signal])
        for label, entry in choices.items():
            values = [f"{entry[metric]:.2f}" for metric in metrics]
            run = escape_markdown(f"{row['variant']} (seed {row['seed']})")
            table.append([run, label, entry["step"], *values])
    return markdown_table(["run", "picked by", "step", *(metric.upper() for metric in metrics)], table)


def study_main(description: str, argv: list[str] | None = None) -> None:
    """The command line of ``studies/study.py``: one study YAML, run or reported."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "study", help="The study YAML (recipes/wines/study.yaml, recipes/debian/study.yaml, ...)."
    )
    parser.add_argument(
        "--results", help="JSON-lines results file (appended); default: the study's own `results`."
    )
    parser.add_argument("--only", nargs="+", help="Run these variants only.")
    parser.add_argument("--seeds", nargs="+", type=int, default=[42])
    parser.add_argument(
        "--report", action="store_true", help="Print the markdown table of the results and exit."
    )
    parser.add_argument("--reference", help="With --report: the variant the others are compared with.")
    parser.add_argument("--json", help="With --report: also write the summary as JSON to this file.")
    parser.add_argument(
        "--selection",
        action="store_true",
        help="With --report: also print which evaluation each label-free signal picks in runs evaluated several times.",
    )
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    study = Study.from_yaml(options.study)
    if options.results is None and study.results is None:
        parser.error(f"{options.study} names no `results` file: pass --results.")
    results_path = Path(options.results or study.results)
    if options.report:
        summary = summarise(read_results(results_path), study)
        print(
            summary_table(summary, options.reference, study.spread, study.trainer_class.card_method.metrics)
        )
        if options.selection:
            print("\n" + selection_table(read_results(results_path)))
        if options.json:
            report = {"noise": seed_noise(summary), "reference": options.reference, "variants": summary}
            Path(options.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        return
    run_study(study, options.only or list(study.variants), options.seeds, results_path)


if __name__ == "__main__":
    study_main(__doc__)
