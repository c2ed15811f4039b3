"""Run under ``accelerate launch --config_file accelerate_configs/zero3.yaml``: the model loads
with its parameters partitioned by ZeRO-3, and the trainer's frozen guide must still be a whole,
exact copy of the starting encoder.

Usage: accelerate launch --config_file accelerate_configs/zero3.yaml THIS_FILE MODEL_PATH OUTPUT_JSON
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer

from metricbert_trainer.base.distributed import process_group_closed_at_exit
from metricbert_trainer.base.modeling import load_masked_lm
from metricbert_trainer.metricbert.config import MetricBertConfig
from metricbert_trainer.metricbert.trainer import MetricBertTrainer


def main(model_path: str, output_path: str) -> None:
    with tempfile.TemporaryDirectory() as output_dir:
        # Building the arguments under a ZeRO-3 launch makes transformers load models partitioned.
        # fp32: under bf16 ZeRO-3 would load (and the guide copy) bf16 weights, not the file's.
        args = MetricBertConfig(output_dir=output_dir, report_to="none", cpu_bf16=False)
        model = load_masked_lm(model_path)
        partitioned = all(hasattr(parameter, "ds_id") for parameter in model.parameters())
        trainer = MetricBertTrainer(
            model=model, args=args, processing_class=AutoTokenizer.from_pretrained(model_path)
        )
    saved = load_file(str(Path(model_path) / "model.safetensors"))
    prefix = model.base_model_prefix + "."
    differences = [
        float((tensor - saved[prefix + name]).abs().max())
        for name, tensor in trainer.guide.encoder.state_dict().items()
        if prefix + name in saved
    ]
    if torch.distributed.get_rank() == 0:
        result = {
            "partitioned": partitioned,
            "compared_tensors": len(differences),
            "max_difference": max(differences),
        }
        Path(output_path).write_text(json.dumps(result, indent=2), encoding="utf-8")


if __name__ == "__main__":
    with process_group_closed_at_exit():
        main(*sys.argv[1:])
