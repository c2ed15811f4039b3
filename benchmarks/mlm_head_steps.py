"""The MLM-head warm-up's own steps, variant by variant, on the same encoded masked tokens.

    python benchmarks/mlm_head_steps.py --catalog data/debian/debian-packages-4000.csv
    python benchmarks/mlm_head_steps.py --catalog data/wines/winemag-sample-5811.csv

The frozen all-MiniLM-L6-v2 (the any-catalog recipe's settings, fp32, dropout as the warm-up
encodes: on, but off the attention probabilities) encodes batches of the catalog once, until they
hold the largest token budget of ``VARIANTS``, and 4 probe batches. Every variant then trains a
fresh head from the same random initialisation on a prefix of those states (its token budget),
for its steps, at its learning rate, on whole batches or on a draw of masked tokens per step, with
or without the catalog's word prior as the starting output bias. It prints the encoding's time per
batch, each variant's head-step time and its probe batches' MLM loss after: the choices behind
``mlm_head_warmup_masked_tokens``, ``_tokens_per_step``, ``_learning_rate`` and ``_word_prior``
(benchmarks/RESULTS.md, "The MLM-head warm-up").
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import tempfile
import time

import torch
from transformers import AutoTokenizer
from versus_sentence_transformers import cpu_name, kernels

from metricbert_trainer.base.attention import attention_dropout_off
from metricbert_trainer.base.length_groups import length_groups_on
from metricbert_trainer.base.modeling import find_mlm_head, load_masked_lm, resolve_model_name
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.metricbert.config import MetricBertConfig
from metricbert_trainer.metricbert.mlm_warmup import (
    PROBE_BATCHES,
    frozen_masked_states,
    head_loss,
    head_parameters,
)
from metricbert_trainer.metricbert.trainer import MetricBertTrainer
from metricbert_trainer.metricbert.word_prior import set_output_bias, word_piece_log_prior
from metricbert_trainer.scripts.arguments import DataArguments, ModelArguments, parse_recipe_args

RECIPE = "recipes/catalog/minilm.yaml"


@dataclasses.dataclass(frozen=True)
class HeadVariant:
    masked_tokens: int
    steps: int = 100
    learning_rate: float = 1e-3
    tokens_per_step: int = 0  # 0: the masked tokens of one whole encoded batch a step, cycled
    word_prior: bool = False


VARIANTS = {
    "previous default (25,000 tokens, whole batches, 1e-3)": HeadVariant(25_000),
    "256 tokens a step": HeadVariant(25_000, tokens_per_step=256),
    "256 tokens a step, 3e-3": HeadVariant(25_000, learning_rate=3e-3, tokens_per_step=256),
    "15,000 tokens, 256 a step, 3e-3": HeadVariant(15_000, learning_rate=3e-3, tokens_per_step=256),
    "10,000 tokens, 256 a step, 3e-3": HeadVariant(10_000, learning_rate=3e-3, tokens_per_step=256),
    "word prior, 15,000 tokens, 256 a step, 3e-3": HeadVariant(15_000, 100, 3e-3, 256, True),
    "word prior, 10,000 tokens, 256 a step, 3e-3 (default)": HeadVariant(10_000, 100, 3e-3, 256, True),
    "word prior, 10,000 tokens, 256 a step, 1e-3": HeadVariant(10_000, 100, 1e-3, 256, True),
    "word prior, 10,000 tokens, 256 a step, 3e-3, 50 steps": HeadVariant(10_000, 50, 3e-3, 256, True),
    "word prior, 5,000 tokens, 256 a step, 3e-3": HeadVariant(5_000, 100, 3e-3, 256, True),
}


def encoded_states(catalog_path: str, output_dir: str):
    """The recipe's model and trainer on the catalog, the probe batches' masked states and those of
    batches encoded until they hold the largest budget, each batch's separately, and the seconds a batch took."""
    model_args, _, args = parse_recipe_args(
        (ModelArguments, DataArguments, MetricBertConfig),
        ["--config", RECIPE, "--catalog", catalog_path, "--output_dir", output_dir, "--cpu_bf16", "false"],
    )
    args = dataclasses.replace(args, report_to="none", disable_tqdm=True, eval_on_start=False)
    path = resolve_model_name(model_args.model_name_or_path)
    trainer = MetricBertTrainer(
        model=load_masked_lm(path),
        args=args,
        train_dataset=load_catalog(catalog_path).dataset,
        processing_class=AutoTokenizer.from_pretrained(path),
    )
    budget = max(variant.masked_tokens for variant in VARIANTS.values())
    groups = length_groups_on(args.device, args.length_groups)
    model = trainer.model.train()
    batches = iter(trainer.warmup_loader())
    encoded, held = [], 0
    started = time.perf_counter()
    with torch.no_grad(), attention_dropout_off(model):
        probes = [
            frozen_masked_states(model, next(batches), trainer.batch_fields, groups)
            for _ in range(PROBE_BATCHES)
        ]
        while held < budget:
            encoded.append(frozen_masked_states(model, next(batches), trainer.batch_fields, groups))
            held += len(encoded[-1][1])
    per_batch = (time.perf_counter() - started) / (len(encoded) + PROBE_BATCHES)
    return trainer, probes, encoded, per_batch


def train_head(
    trainer, probes, encoded, variant: HeadVariant, initial_head: dict, word_prior: torch.Tensor
) -> tuple[int, float, float]:
    """The batches ``variant`` uses, its head steps' seconds and the probe batches' MLM loss after."""
    model = trainer.model
    find_mlm_head(model).load_state_dict(initial_head)
    if variant.word_prior:
        set_output_bias(model, word_prior)
    used, held = [], 0
    for states in encoded:
        if held >= variant.masked_tokens:
            break
        used.append(states)
        held += len(states[1])
    pool = torch.cat([hidden for hidden, _ in used]), torch.cat([labels for _, labels in used])
    parameters = head_parameters(model)
    for parameter in parameters:
        parameter.requires_grad_(True)
    optimizer = torch.optim.AdamW(parameters, lr=variant.learning_rate, weight_decay=0.0)
    draws = torch.Generator().manual_seed(0)
    started = time.perf_counter()
    for step in range(variant.steps):
        if variant.tokens_per_step:
            rows = torch.randperm(len(pool[1]), generator=draws)[: variant.tokens_per_step]
            states = pool[0][rows], pool[1][rows]
        else:
            states = used[step % len(used)]
        loss = head_loss(model, states)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    seconds = time.perf_counter() - started
    with torch.no_grad():
        after = sum(float(head_loss(model, probe)) for probe in probes) / len(probes)
    return len(used), seconds, after


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--catalog", default="data/debian/debian-packages-4000.csv")
    arguments = parser.parse_args(argv)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as output_dir:
        trainer, probes, encoded, per_batch = encoded_states(arguments.catalog, output_dir)
    initial_head = copy.deepcopy(find_mlm_head(trainer.model).state_dict())
    word_prior = word_piece_log_prior(trainer.processing_class, trainer.training_token_rows.values())
    with torch.no_grad():
        before = sum(float(head_loss(trainer.model, probe)) for probe in probes) / len(probes)
    tokens_per_batch = sum(len(labels) for _, labels in encoded) / len(encoded)
    print(
        f"\n{arguments.catalog}; {cpu_name()}, {kernels()}; fp32; {torch.get_num_threads()} threads; "
        f"encoding {per_batch:.2f} s a batch of {tokens_per_batch:.0f} masked tokens; probe MLM loss of the "
        f"fresh head {before:.3f}\n"
    )
    print("| variant | batches encoded | head steps (s) | probe MLM loss after |")
    print("|---|---:|---:|---:|")
    for name, variant in VARIANTS.items():
        batches, seconds, after = train_head(trainer, probes, encoded, variant, initial_head, word_prior)
        print(f"| {name} | {batches} | {seconds:.1f} | {after:.3f} |", flush=True)


if __name__ == "__main__":
    main()
