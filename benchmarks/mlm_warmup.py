"""The MLM-head warm-up's cost beside the training it precedes, and the MLM loss it hands over.

    python benchmarks/mlm_warmup.py --catalog data/debian/debian-packages-4000.csv
    python benchmarks/mlm_warmup.py --catalog data/wines/winemag-sample-5811.csv

For each of ``--variants`` (the warm-up's options, ``VARIANTS``) the any-catalog recipe
(``recipes/catalog/minilm.yaml``, fp32 as the quality tables train) builds its trainer on the
catalog, runs the warm-up, then ``--steps`` joint steps. It prints the warm-up's wall time, the
training it precedes (the median joint step times the epoch's steps: an estimate that flatters the
ratio, benchmarks/RESULTS.md), their ratio (issue #37's target: at most 0.15), the probe batches'
MLM loss before, with the word prior and after the warm-up, and the mean MLM loss of those first
joint steps: what the warm-up exists for is the head the joint objective starts from.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import tempfile

from step_timer import StepTimer
from transformers import AutoTokenizer
from versus_sentence_transformers import cpu_name, kernels

from metricbert_trainer.base.modeling import load_masked_lm, resolve_model_name
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.metricbert.config import MetricBertConfig
from metricbert_trainer.metricbert.trainer import MetricBertTrainer
from metricbert_trainer.scripts.arguments import DataArguments, ModelArguments, parse_recipe_args

RECIPE = "recipes/catalog/minilm.yaml"

# The warm-up's options by variant, over the recipe's; "default" is the recipe as it is.
VARIANTS = {
    "default": [],
    "without the word prior": ["--mlm_head_warmup_word_prior", "false"],
    "previous default": [
        "--mlm_head_warmup_masked_tokens", "25000",
        "--mlm_head_warmup_tokens_per_step", "0",
        "--mlm_head_warmup_word_prior", "false",
        "--mlm_head_warmup_learning_rate", "1e-3",
    ],
    "fresh batches": [
        "--mlm_head_warmup_masked_tokens", "0",
        "--mlm_head_warmup_tokens_per_step", "0",
        "--mlm_head_warmup_word_prior", "false",
        "--mlm_head_warmup_learning_rate", "1e-3",
    ],
}  # fmt: skip


def measure(catalog_path: str, variant: str, steps: int, output_dir: str) -> dict:
    model_args, _, args = parse_recipe_args(
        (ModelArguments, DataArguments, MetricBertConfig),
        ["--config", RECIPE, "--catalog", catalog_path, "--output_dir", output_dir, "--cpu_bf16", "false"]
        + VARIANTS[variant],
    )
    args = dataclasses.replace(
        args,
        max_steps=steps,
        logging_steps=steps,
        save_strategy="no",
        eval_strategy="no",
        eval_on_start=False,
        report_to="none",
        disable_tqdm=True,
    )
    items = load_catalog(catalog_path).dataset
    path = resolve_model_name(model_args.model_name_or_path)
    timer = StepTimer()
    trainer = MetricBertTrainer(
        model=load_masked_lm(path),
        args=args,
        train_dataset=items,
        processing_class=AutoTokenizer.from_pretrained(path),
        callbacks=[timer],
    )
    epoch_steps = math.ceil(len(items) / args.per_device_train_batch_size)
    trainer.train()
    warmup = trainer.mlm_head_warmup
    training = statistics.median(timer.durations) * epoch_steps
    logged = next(entry for entry in trainer.state.log_history if "mlm_loss" in entry)
    return {
        "variant": variant,
        "encoded": (warmup.encoded_batches, warmup.encoded_tokens),
        "warmup_seconds": warmup.seconds,
        "training_seconds": training,
        "epoch_steps": epoch_steps,
        "probe_loss": (warmup.loss_before, warmup.loss_with_prior, warmup.loss_after),
        "first_mlm_loss": logged["mlm_loss"],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--catalog", default="data/debian/debian-packages-4000.csv")
    parser.add_argument(
        "--variants", nargs="+", choices=list(VARIANTS), default=["default", "previous default"]
    )
    parser.add_argument("--steps", type=int, default=10, help="Joint steps after the warm-up.")
    arguments = parser.parse_args(argv)
    rows = []
    for variant in arguments.variants:
        with tempfile.TemporaryDirectory() as output_dir:
            rows.append(measure(arguments.catalog, variant, arguments.steps, output_dir))
        print(rows[-1], flush=True)
    print(f"\n{arguments.catalog}; {cpu_name()}, {kernels()}; fp32; {arguments.steps} joint steps timed\n")
    print(
        "| warm-up | batches (masked tokens) encoded | warm-up (s) | training, epoch (s) | warm-up / training "
        f"| probe MLM loss before -> with the word prior -> after | MLM loss, first {arguments.steps} joint steps |"
    )
    print("|---|---:|---:|---:|---:|---|---:|")
    for row in rows:
        before, with_prior, after = row["probe_loss"]
        prior = "" if with_prior is None else f"{with_prior:.3f} -> "
        batches, tokens = row["encoded"]
        print(
            f"| {row['variant']} | {batches} ({tokens}) | {row['warmup_seconds']:.1f} | {row['training_seconds']:.1f} "
            f"({row['epoch_steps']} steps) | {row['warmup_seconds'] / row['training_seconds']:.2f} "
            f"| {before:.3f} -> {prior}{after:.3f} | {row['first_mlm_loss']:.3f} |"
        )


if __name__ == "__main__":
    main()
