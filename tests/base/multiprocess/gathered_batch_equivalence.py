"""Run under ``accelerate launch`` with several processes: cross-device mining must train P
shards of a batch exactly like one process trains the whole batch.

Every process collates the same batch (same seed, so the same MLM masks), computes the
single-process reference on all of it with a plain model, then takes its own rows and runs the
trainer's ``compute_loss`` through the DDP-wrapped model. Rank 0 writes, per case, the reference
loss and gradients' distance to the processes' mean loss and DDP-averaged gradients, for
``test_distributed.py`` to check.

Usage: accelerate launch --config_file accelerate_configs/cpu.yaml THIS_FILE MODEL_PATH CATALOG OUTPUT_JSON
    TEACHER_ENCODER_PATH  (a second encoder for the hybrid teacher's case)
"""

from __future__ import annotations

import json
import sys
import tempfile

import torch
from transformers import AutoTokenizer, BertForMaskedLM

from metricbert_trainer.base.distributed import process_group_closed_at_exit
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.data.token_rows import TokenRows
from metricbert_trainer.metricbert.collator import MetricBertCollator
from metricbert_trainer.metricbert.config import MetricBertConfig
from metricbert_trainer.metricbert.setup import TrainingSetup
from metricbert_trainer.metricbert.trainer import MetricBertTrainer

# Each case is the bare objective (none of what the recipe, MetricBertConfig's defaults, adds) plus
# its own settings: the comparison is of the gathered mining, not of the recipe's other terms.
BARE = dict(
    mlm_weight=0.0,
    mlm_probability=0.0,
    mlm_head_warmup_steps=0,
    mlm_weight_ramp_steps=0,
    teacher_weight=0.0,
    teacher_shared_neighbours=0,
    batch_neighbourhood_size=0,
    length_groups=1,
)
MLM_AND_FILTER = dict(mlm_weight=1.0, mlm_probability=0.15, false_negative_filter=True)
# (name, rows of each process, objective settings). Uneven rows stand for a last, short batch;
# "local_mining" turns gathering off, as the control that shows the check can fail.
CASES = [
    ("triplet_mlm_filter", [4, 4], MLM_AND_FILTER),
    ("triplet_uneven", [5, 3], MLM_AND_FILTER),
    ("triplet_distill_uneven", [5, 3], dict(distill_weight=1.0, false_negative_filter=True)),
    # The guide's vectors looked up from a cache the processes encoded together.
    (
        "triplet_distill_guide_cache",
        [5, 3],
        dict(distill_weight=1.0, false_negative_filter=True, guide_embedding_cache=True),
    ),
    ("mnrl", [4, 4], dict(objective="mnrl", false_negative_filter=False)),
    ("contrastive_semi_hard", [4, 4], dict(objective="contrastive", mining="semi_hard")),
    (
        "logistic_title_anchors",
        [4, 4],
        dict(objective="logistic_triplet", anchors="title", negative_pool="other_field"),
    ),
    ("local_mining", [4, 4], dict(gather_across_devices=False, false_negative_filter=False)),
]


def teacher_case(teacher_encoder_path: str) -> tuple[str, list[int], dict]:
    """The hybrid teacher with a second encoder: each process looks up its own rows' vectors,
    which must be gathered in the order of the whole batch's."""
    # One max_length for the collator, the TF-IDF and the encoder's keys, as a run resolves it.
    settings = dict(
        teacher_weight=1.0,
        false_negative_filter=True,
        teacher_encoder=teacher_encoder_path,
        max_length=MetricBertCollator.max_length,
    )
    return ("triplet_teacher_encoder", [5, 3], settings)


# The teacher with shared neighbours: each process finds its own rows in the catalog, and the
# rows must be gathered in the order of the whole batch's for the overlaps to match its items.
SHARED_NEIGHBOURS_CASE = (
    "triplet_teacher_shared_neighbours",
    [5, 3],
    dict(
        teacher_weight=1.0,
        false_negative_filter=True,
        teacher_shared_neighbours=3,
        max_length=MetricBertCollator.max_length,
    ),
)


def build(model_path: str, output_dir: str, settings: dict, items) -> MetricBertTrainer:
    # No dropout: the two computations must see the same function.
    model = BertForMaskedLM.from_pretrained(
        model_path, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0
    )
    # fp32 (no CPU bf16 autocast): the comparison is to float32 rounding.
    options = {**BARE, **settings}
    args = MetricBertConfig(output_dir=output_dir, report_to="none", use_cpu=True, cpu_bf16=False, **options)
    return MetricBertTrainer(
        model=model,
        args=args,
        processing_class=AutoTokenizer.from_pretrained(model_path),
        train_dataset=items,
    )


def gradients(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def run_case(model_path: str, catalog, rows_per_process: list[int], settings: dict) -> dict[str, float]:
    total = sum(rows_per_process)
    items = catalog.dataset.select(range(total))
    with tempfile.TemporaryDirectory() as output_dir:
        # The reference computes on the whole batch as a lone process would: nothing to gather.
        reference = build(model_path, output_dir, {**settings, "gather_across_devices": False}, items)
        sharded = build(model_path, output_dir, settings, items)
    accelerator = sharded.accelerator
    rank = accelerator.process_index
    if settings.get("teacher_weight"):
        # What train() prepares before its first step: the teacher's TF-IDF, ...
        for trainer in (reference, sharded):
            trainer.teacher_parts.tfidf = TrainingSetup(trainer).fit_token_tfidf()
    if settings.get("teacher_encoder"):
        # ... the second encoder's vectors of every text, each process encoding a share (the
        # reference reads the same vectors) ...
        sharded.teacher_parts.encoder = TrainingSetup(sharded).encode_with_teacher_encoder()
        reference.teacher_parts.encoder = sharded.teacher_parts.encoder
    if settings.get("teacher_shared_neighbours"):
        # ... and the shared neighbours, listed from the guide's vectors, which the processes encode
        # together into its cache.
        sharded.teacher_parts.shared_neighbours = TrainingSetup(sharded).list_shared_neighbours()
        reference.teacher_parts.shared_neighbours = sharded.teacher_parts.shared_neighbours
    torch.manual_seed(0)
    collator = MetricBertCollator(reference.processing_class, mlm_probability=reference.args.mlm_probability)
    batch = collator(list(items))
    if settings.get("guide_embedding_cache"):
        # As the trainer does before its first step: every process, the same texts, a share each.
        texts = list(items["title"]) + list(items["description"])
        tokens = TokenRows.tokenize(sharded.processing_class, texts, collator.max_length)
        sharded.guide.cache_embeddings(
            sharded.processing_class,
            texts,
            keys=tokens.keys,
            lengths=tokens.lengths,
            max_length=collator.max_length,
            device=accelerator.device,
            autocast=accelerator.autocast,
        )

    # Unwrapped, so no gradient averaging either.
    reference_model = reference.model.train()
    reference_loss = reference.compute_loss(reference_model, batch)
    reference_loss.backward()

    start = sum(rows_per_process[:rank])
    shard = {name: tensor[start : start + rows_per_process[rank]] for name, tensor in batch.items()}
    wrapped = accelerator.prepare_model(sharded.model)
    wrapped.train()
    local_loss = sharded.compute_loss(wrapped, shard)
    local_loss.backward()
    mean_loss = accelerator.reduce(local_loss.detach().reshape(1), reduction="mean")

    expected, actual = gradients(reference_model), gradients(accelerator.unwrap_model(wrapped))
    return {
        "reference_loss": reference_loss.item(),
        "mean_loss": mean_loss.item(),
        "max_gradient_difference": float((expected - actual).abs().max()),
        "gradient_scale": float(expected.abs().max()),
        "gradient_count": expected.numel(),
        "guide_cached_texts": sharded.guide.cached_texts if sharded.guide is not None else 0,
    }


def main(model_path: str, catalog_path: str, output_path: str, teacher_encoder_path: str) -> None:
    catalog = load_catalog(catalog_path)
    cases = [*CASES, teacher_case(teacher_encoder_path), SHARED_NEIGHBOURS_CASE]
    results = {name: run_case(model_path, catalog, rows, settings) for name, rows, settings in cases}
    if torch.distributed.get_rank() == 0:
        results["world_size"] = torch.distributed.get_world_size()
        with open(output_path, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=2)


if __name__ == "__main__":
    with process_group_closed_at_exit():
        main(*sys.argv[1:])
