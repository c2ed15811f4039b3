"""Run under ``accelerate launch`` with several processes on one machine: the guide's cache, which
the processes encode together, must be one copy mapped by all of them (a file of /dev/shm that is
gone once they have mapped it), hold the vectors one process encodes alone, and fall back to a copy
per process where the shared memory's folder is missing.

Usage: accelerate launch --config_file accelerate_configs/cpu.yaml THIS_FILE MODEL_PATH CATALOG OUTPUT_FOLDER
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import numpy as np
from accelerate import PartialState
from transformers import AutoTokenizer

from metricbert_trainer.base.distributed import process_group_closed_at_exit
from metricbert_trainer.base.modeling import load_masked_lm
from metricbert_trainer.base.node_memory import node_array
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.data.token_rows import TokenRows
from metricbert_trainer.evaluation.encoding import encode_texts
from metricbert_trainer.metricbert.guide import StartingModelGuide


def shared_memory_maps() -> list[str]:
    """The files of /dev/shm this process maps that this library made."""
    lines = Path("/proc/self/maps").read_text().splitlines()
    return sorted({line.split(maxsplit=5)[5] for line in lines if "/dev/shm/metricbert-" in line})


def main(model_path: str, catalog_path: str, output_folder: str) -> None:
    state = PartialState(cpu=True)
    model, tokenizer = load_masked_lm(model_path), AutoTokenizer.from_pretrained(model_path)
    catalog = load_catalog(catalog_path)
    texts = catalog.texts("title")[:20] + catalog.texts("description")[:17]
    tokens = TokenRows.tokenize(tokenizer, texts, 64)
    guide = StartingModelGuide(model)
    guide.cache_embeddings(
        tokenizer,
        texts,
        keys=tokens.keys,
        lengths=tokens.lengths,
        max_length=64,
        device=state.device,
        autocast=contextlib.nullcontext,
        batch_size=4,
    )
    alone = encode_texts(guide.encoder, tokenizer, texts, batch_size=4, max_length=64)
    cached = guide.cache_matrix().numpy()[guide.cache_rows(tokens.keys)]
    elsewhere = node_array((5, 3), np.float32, what="a test array", folder=Path(output_folder) / "missing")
    result = {
        "processes": state.num_processes,
        "sharers": guide.cache_sharers,
        "maps": shared_memory_maps(),
        "max_difference": float(np.abs(cached - alone).max()),
        "fallback_sharers": elsewhere.sharers,
        "fallback_writer": elsewhere.writer,
    }
    name = Path(output_folder) / f"rank{state.process_index}.json"
    name.write_text(json.dumps(result), encoding="utf-8")


if __name__ == "__main__":
    with process_group_closed_at_exit():
        main(*sys.argv[1:])
