"""Run under ``accelerate launch`` with two processes: the catalog's tokens counted and tokenized in
shares, as a launched training and a shared encoding do (``training.trainer.shared_token_rows`` and
``encoding.longest_first`` with ``across_processes``), the ids gathered in one piece and in pieces
of a few bytes (``distributed.GATHER_BYTES``). Each process writes what it received and how many
texts its tokenizer was given.

Usage: accelerate launch --config_file accelerate_configs/cpu.yaml THIS_FILE TOKENIZER_PATH TEXTS_JSON OUTPUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from unittest import mock

import numpy as np
from accelerate import PartialState
from counted_tokenizer import count_texts_tokenized
from transformers import AutoTokenizer

from metricbert_trainer.base import distributed
from metricbert_trainer.base.distributed import process_group_closed_at_exit
from metricbert_trainer.evaluation.encoding import longest_first
from metricbert_trainer.training.trainer import shared_token_rows


def main(tokenizer_path: str, texts_json: str, output_dir: str) -> None:
    state = PartialState(cpu=True)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    texts = json.loads(Path(texts_json).read_text(encoding="utf-8"))
    tokenized = count_texts_tokenized(tokenizer)
    whole = shared_token_rows(tokenizer, texts, 32, state.device)
    rows_tokenized = tokenized[0]
    # The ids in hundreds of pieces, a piece ending inside a row (for this check alone: the launch
    # may run other checks after it, in_one_launch.py).
    with mock.patch.object(distributed, "GATHER_BYTES", 64):
        pieces = shared_token_rows(tokenizer, texts, 32, state.device)
    tokenized[0] = 0
    order = longest_first(tokenizer, texts, 32, across_processes=True, device=state.device)
    folder = Path(output_dir)
    np.savez(
        folder / f"rank{state.process_index}.npz",
        ids=whole.ids,
        offsets=whole.offsets,
        pieces_ids=pieces.ids,
        pieces_offsets=pieces.offsets,
        order=order,
        rows_tokenized=rows_tokenized,
        order_tokenized=tokenized[0],
    )


if __name__ == "__main__":
    with process_group_closed_at_exit():
        main(*sys.argv[1:])
