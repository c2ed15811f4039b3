"""Run under ``accelerate launch`` with several processes: the training evaluation's ranking
(``RankingEvaluator``, which the trainer calls on every process) must leave the catalog's vectors
and the seeds' distance rows with process 0 alone, and give every process its metrics.

Each process records the metrics it got and the most memory Python's allocators (NumPy's arrays
among them) held during the evaluation.

Usage: accelerate launch --config_file accelerate_configs/cpu.yaml THIS_FILE MODEL_PATH ITEMS OUTPUT_FOLDER
"""

from __future__ import annotations

import json
import sys
import tracemalloc
from pathlib import Path

import pandas as pd
from accelerate import PartialState
from cache_only_encoding import numbered_views
from transformers import AutoModel, AutoTokenizer

from metricbert_trainer.base.distributed import process_group_closed_at_exit
from metricbert_trainer.data.annotations import Annotations
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.evaluation.evaluator import RankingEvaluator


def main(model_path: str, items: str, output_folder: str) -> None:
    state = PartialState(cpu=True)
    model, tokenizer = AutoModel.from_pretrained(model_path), AutoTokenizer.from_pretrained(model_path)
    items = int(items)
    views = numbered_views(items)
    catalog = load_catalog(pd.DataFrame({"id": [f"item-{item}" for item in range(items)], **views}))
    # 50 seeds, each annotated with the items that share its title's words (item % 5).
    seeds = range(0, items, items // 50)
    similar = {seed: [item for item in range(seed % 5, items, 5 * 97) if item != seed][:20] for seed in seeds}
    annotations = Annotations({seed: tuple(items) for seed, items in similar.items()}, source="synthetic")
    evaluator = RankingEvaluator(catalog, annotations, batch_size=256, max_length=16)
    # Never stopped: tracemalloc.stop() while other threads free arrays crashed CPython before
    # 3.12.9 (gh-128679). A check run before this one in the same launch (in_one_launch.py) may
    # have started it: the peak is counted from here, above what was held here.
    tracemalloc.start()
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    metrics = evaluator(model, tokenizer)
    peak = tracemalloc.get_traced_memory()[1] - held
    result = {"processes": state.num_processes, "metrics": metrics, "peak": peak}
    Path(output_folder, f"rank{state.process_index}.json").write_text(json.dumps(result), encoding="utf-8")


if __name__ == "__main__":
    with process_group_closed_at_exit():
        main(*sys.argv[1:])
