"""Run under ``accelerate launch`` with several processes: encoding texts shared among the
processes (``across_processes=True``) must give every process the same vectors as encoding all
of them alone. An odd number of texts makes the shares unequal; they are gathered a few rows at a time.

Usage: accelerate launch --config_file accelerate_configs/cpu.yaml THIS_FILE MODEL_PATH CATALOG OUTPUT_JSON
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from unittest import mock

import numpy as np
import torch
from accelerate import PartialState
from transformers import AutoTokenizer

from metricbert_trainer.base.distributed import process_group_closed_at_exit
from metricbert_trainer.base.modeling import load_masked_lm
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.evaluation import encoding
from metricbert_trainer.evaluation.encoding import encode_texts


def main(model_path: str, catalog_path: str, output_path: str) -> None:
    state = PartialState(cpu=True)
    model, tokenizer = load_masked_lm(model_path), AutoTokenizer.from_pretrained(model_path)
    texts = load_catalog(catalog_path).texts("description")[:37]
    # Shares of 19 and 18 texts gathered 5 rows at a time: the last piece is short, and the shorter
    # share's padding row falls in it.
    # (Set for this check alone: the launch may run other checks after it, in_one_launch.py.)
    with mock.patch.object(encoding, "GATHER_ROWS", 5):
        shared = encode_texts(model, tokenizer, texts, batch_size=4, across_processes=True)
        alone = encode_texts(model, tokenizer, texts, batch_size=4)
        # In float16 (the guide's cache), each gathered piece cast as it lands in its rows: every
        # value the single process's, rounded, give or take the one step a 1e-6 difference can flip.
        halved = encode_texts(model, tokenizer, texts, batch_size=4, across_processes=True, dtype=np.float16)
    rounded = alone.astype(np.float16)
    steps = np.abs(halved.astype(np.float32) - rounded) / np.spacing(np.abs(rounded)).astype(np.float32)
    difference = torch.tensor([float(np.abs(shared - alone).max()), float(steps.max())])
    torch.distributed.all_reduce(difference, op=torch.distributed.ReduceOp.MAX)
    if state.is_main_process:
        result = {
            "processes": state.num_processes,
            "texts": len(texts),
            "max_difference": float(difference[0]),
            "float16": str(halved.dtype),
            "float16_max_steps": float(difference[1]),
        }
        Path(output_path).write_text(json.dumps(result), encoding="utf-8")


if __name__ == "__main__":
    with process_group_closed_at_exit():
        main(*sys.argv[1:])
