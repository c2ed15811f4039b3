"""One process of ``benchmarks/million_items.py shared-encoding``, started by ``accelerate launch``.

Two things the processes of a launch do together with ``--texts`` wine descriptions drawn with
replacement (their lengths are the wine sample's): a training's start tokenizes them
(``shared_token_rows``, truncated at 128, as ``training_token_rows``), then they are encoded
across the processes (``encode_texts(across_processes=True, first_process_only=True)``, as
``metricbert encode`` does) with a randomly initialised one-layer encoder of ``--hidden`` floats a
vector: a fast encoder, as a GPU is beside a CPU's tokenizer, so that what every process does
besides its share shows. Each process writes both times and its peak resident memory to
``--output``/rank<R>.json. On a tree before 2026-11-30 each process tokenizes every text.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import pandas as pd
from accelerate import PartialState
from million_items import BENCHMARKS, REPO_ROOT, wide_random_encoder
from transformers import AutoTokenizer, BertModel

from metricbert_trainer.base.distributed import process_group_closed_at_exit
from metricbert_trainer.base.modeling import DEFAULT_MODEL, resolve_model_name
from metricbert_trainer.data.token_rows import TokenRows
from metricbert_trainer.evaluation.encoding import encode_texts
from metricbert_trainer.training import trainer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--texts", type=int, required=True)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    state = PartialState(cpu=True)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_name(DEFAULT_MODEL))
    model = wide_random_encoder(tokenizer, args.hidden, BertModel).eval()
    wines = pd.read_csv(REPO_ROOT / BENCHMARKS["wines"][0]).dropna(subset=["description"])
    texts = wines.description.sample(n=args.texts, replace=True, random_state=0).astype(str).tolist()
    shared = getattr(trainer, "shared_token_rows", None)
    state.wait_for_everyone()
    started = time.perf_counter()
    if shared:
        shared(tokenizer, texts, 128, state.device)
    else:  # a tree before 2026-11-30
        TokenRows.tokenize(tokenizer, texts, 128)
    state.wait_for_everyone()
    tokenized = time.perf_counter() - started
    started = time.perf_counter()
    encode_texts(
        model,
        tokenizer,
        texts,
        batch_size=256,
        max_length=128,
        across_processes=True,
        first_process_only=True,
    )
    record = {
        "processes": state.num_processes,
        "token_rows_seconds": tokenized,
        "seconds": time.perf_counter() - started,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    }
    (args.output / f"rank{state.process_index}.json").write_text(json.dumps(record), encoding="utf-8")


if __name__ == "__main__":
    with process_group_closed_at_exit():
        main()
