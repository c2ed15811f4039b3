"""One process of ``benchmarks/million_items.py ranking``, started by ``accelerate launch``.

Runs the training evaluation's ranking (``RankingEvaluator``, which the trainer calls on every
process) on a catalog of ``--items`` items whose title and description are distinct synthetic
texts, from ``--seeds`` annotated seeds, with a randomly initialised one-layer encoder of
``--hidden`` floats a vector: what the evaluation holds depends on how many vectors there are and
how wide, not on the encoder's depth. Each process writes its time and its peak resident memory
to ``--output``/rank<R>.json.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import numpy as np
import pandas as pd
from accelerate import PartialState
from million_items import synthetic_texts, wide_random_encoder
from transformers import AutoTokenizer, BertModel

from metricbert_trainer.base.distributed import process_group_closed_at_exit
from metricbert_trainer.base.modeling import DEFAULT_MODEL, resolve_model_name
from metricbert_trainer.data.annotations import Annotations
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.evaluation.evaluator import RankingEvaluator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, required=True)
    parser.add_argument("--seeds", type=int, default=500)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    state = PartialState(cpu=True)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_name(DEFAULT_MODEL))
    model = wide_random_encoder(tokenizer, args.hidden, BertModel)
    texts = synthetic_texts(2 * args.items)
    ids = [f"item-{item}" for item in range(args.items)]
    catalog = load_catalog(pd.DataFrame({"id": ids, "title": texts[::2], "description": texts[1::2]}))
    rng = np.random.default_rng(0)
    seeds = rng.choice(args.items, args.seeds, replace=False)
    annotations = Annotations(
        {
            int(seed): tuple(int(item) for item in rng.choice(args.items, 11, replace=False) if item != seed)[
                :10
            ]
            for seed in seeds
        },
        source="synthetic",
    )
    evaluator = RankingEvaluator(catalog, annotations, batch_size=256, max_length=32)
    started = time.perf_counter()
    metrics = evaluator(model, tokenizer)
    record = {
        "processes": state.num_processes,
        "seconds": time.perf_counter() - started,
        "mpr": metrics["mpr"],
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    }
    (args.output / f"rank{state.process_index}.json").write_text(json.dumps(record), encoding="utf-8")


if __name__ == "__main__":
    with process_group_closed_at_exit():
        main()
