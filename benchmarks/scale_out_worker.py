"""One measured training run of ``benchmarks/scale_out.py``, started by ``accelerate launch``.

Trains MetricBERT (the paper's objective: MLM + triplet, hard negatives) with the real trainer
on synthetic catalog items whose title and description both fill ``--max-length`` tokens, so
every sequence has exactly that length and the FLOP count is exact. The encoder is built from
its config (no Hub weights are needed, and speed does not depend on the values of the weights).
Process 0 writes a JSON record: seconds per step (median over the measured steps), items per
second, peak GPU memory over processes, and model FLOPs utilisation.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import torch
from datasets import Dataset
from step_timer import StepProfiler, StepTimer
from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

from metricbert_trainer.base.distributed import process_group_closed_at_exit
from metricbert_trainer.base.modeling import resolve_model_name
from metricbert_trainer.metricbert.config import MetricBertConfig
from metricbert_trainer.metricbert.trainer import MetricBertTrainer

MODEL_SIZES = {
    # BERT-Large (bert-large-uncased's shape).
    "large": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096),
    # A few-layer model for checking the script on a CPU.
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128),
}
# Dense bf16 tensor-core peaks (FLOP/s) from the vendors' data sheets.
PEAK_BF16_FLOPS = {"H100": 989.4e12, "H200": 989.4e12, "A100": 312e12}
WORDS = (
    "ripe black cherry plum tannins oak vanilla acidity crisp citrus mineral finish spice "
    "earthy structured velvety aromas palate berry herbal smoky bright"
).split()


def synthetic_items(count: int, words_per_text: int) -> Dataset:
    """Items whose fields are long enough to be truncated to the benchmark's length."""
    generator = torch.Generator().manual_seed(0)

    def text() -> str:
        picks = torch.randint(len(WORDS), (words_per_text,), generator=generator).tolist()
        return " ".join(WORDS[index] for index in picks)

    return Dataset.from_dict(
        {"title": [text() for _ in range(count)], "description": [text() for _ in range(count)]}
    )


def training_flops_per_item(
    config: BertConfig, max_length: int, mlm_probability: float, guide: bool
) -> float:
    """Model FLOPs of one item's training step: forward and backward of both fields' sequences
    (``6 N`` per token for the matrix multiplications plus ``12 L d S`` for attention), the MLM
    head on the masked tokens, and the frozen guide's forward when it runs. Recomputation under
    activation checkpointing is not counted (this is MFU, not hardware FLOPs utilisation)."""
    layers, hidden = config.num_hidden_layers, config.hidden_size
    encoder_matmul_parameters = layers * (4 * hidden * hidden + 2 * hidden * config.intermediate_size)
    tokens = 2 * max_length
    per_token = 6 * encoder_matmul_parameters + 12 * layers * hidden * max_length
    head = 6 * (hidden * hidden + hidden * config.vocab_size) * mlm_probability * tokens
    guide_forward = (
        (2 * encoder_matmul_parameters + 4 * layers * hidden * max_length) * tokens if guide else 0
    )
    return per_token * tokens + head + guide_forward


def engine_name(trainer: MetricBertTrainer, world_size: int) -> str:
    if trainer.is_deepspeed_enabled:
        return "DeepSpeed"
    if trainer.is_fsdp_enabled:
        return "FSDP"
    return "DDP" if world_size > 1 else "one process"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True)
    parser.add_argument("--model-size", choices=sorted(MODEL_SIZES), default="large")
    parser.add_argument("--batch-size", type=int, default=32, help="Items per process and step.")
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--warmup-steps", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20, help="Measured steps after the warm-up.")
    parser.add_argument("--activation-checkpointing", action="store_true")
    parser.add_argument("--false-negative-filter", action="store_true")
    parser.add_argument(
        "--profile", default=None, help="Write a torch.profiler table of 3 measured steps here."
    )
    arguments = parser.parse_args()

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_name("sentence-transformers/all-MiniLM-L6-v2"))
    config = BertConfig(
        vocab_size=tokenizer.vocab_size, max_position_embeddings=512, **MODEL_SIZES[arguments.model_size]
    )
    torch.manual_seed(0)
    model = BertForMaskedLM(config)
    parameter_count = model.num_parameters()  # before DeepSpeed or FSDP partition the weights
    on_gpu = torch.cuda.is_available()
    total_steps = arguments.warmup_steps + arguments.steps
    with tempfile.TemporaryDirectory() as output_dir:
        args = MetricBertConfig(
            output_dir=output_dir,
            per_device_train_batch_size=arguments.batch_size,
            max_steps=total_steps,
            learning_rate=2e-5,
            bf16=on_gpu,
            activation_checkpointing=arguments.activation_checkpointing,
            max_length=arguments.max_length,
            mlm_weight=1.0,
            distill_weight=0.0,  # the paper's objective: no forgetting guard
            mlm_probability=0.15,
            # nor what the recipe (MetricBertConfig's defaults) adds: the head's warm-up, the teacher,
            # length groups (a CPU run measures the one padded batch per field it always measured)
            mlm_head_warmup_steps=0,
            mlm_weight_ramp_steps=0,
            teacher_weight=0.0,
            batch_neighbourhood_size=0,
            length_groups=1,
            false_negative_filter=arguments.false_negative_filter,
            guide_diagnostics=arguments.false_negative_filter,
            logging_steps=total_steps,
            save_strategy="no",
            report_to="none",
            dataloader_drop_last=True,
            disable_tqdm=True,
        )
        world_size = args.world_size
        items = synthetic_items(arguments.batch_size * world_size * total_steps, arguments.max_length)
        timer = StepTimer()
        callbacks = [timer]
        if arguments.profile and args.process_index == 0:
            callbacks.append(StepProfiler(arguments.profile, first=arguments.warmup_steps))
        trainer = MetricBertTrainer(
            model=model, args=args, train_dataset=items, processing_class=tokenizer, callbacks=callbacks
        )
        if on_gpu:
            torch.cuda.reset_peak_memory_stats()
        trainer.train()
    measured = timer.durations[arguments.warmup_steps :]
    seconds_per_step = statistics.median(measured)
    items_per_second = arguments.batch_size * world_size / seconds_per_step
    peak_memory = torch.tensor(
        float(torch.cuda.max_memory_allocated()) if on_gpu else 0.0, device=args.device
    )
    if world_size > 1:
        torch.distributed.all_reduce(peak_memory, op=torch.distributed.ReduceOp.MAX)
    flops_per_item = training_flops_per_item(
        config, arguments.max_length, args.mlm_probability, arguments.false_negative_filter
    )
    device_name = torch.cuda.get_device_name() if on_gpu else "cpu"
    peak = next((flops for name, flops in PEAK_BF16_FLOPS.items() if name in device_name), None)
    record = {
        "device": device_name,
        "processes": world_size,
        "engine": engine_name(trainer, world_size),
        "model_size": arguments.model_size,
        "parameters": parameter_count,
        "batch_size_per_process": arguments.batch_size,
        "max_length": arguments.max_length,
        "activation_checkpointing": arguments.activation_checkpointing,
        "bf16": on_gpu,
        "measured_steps": len(measured),
        "seconds_per_step_median": seconds_per_step,
        "items_per_second": items_per_second,
        "peak_memory_gib": float(peak_memory) / 2**30,
        "model_tflops_per_second": flops_per_item * items_per_second / 1e12,
        "mfu": flops_per_item * items_per_second / (peak * world_size) if peak else None,
    }
    if args.process_index == 0:
        Path(arguments.output).write_text(json.dumps(record, indent=2), encoding="utf-8")


if __name__ == "__main__":
    with process_group_closed_at_exit():
        main()
