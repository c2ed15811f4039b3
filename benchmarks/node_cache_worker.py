"""One process of ``benchmarks/million_items.py node-cache``, started by ``accelerate launch``.

Fills the guide's cache of ``--texts`` distinct synthetic texts as a training run's processes do
(each encodes a share, every process gets every vector), with a randomly initialised one-layer
encoder of ``--hidden`` floats a vector: the cache's memory depends on how many vectors it holds
and how wide they are, not on the encoder's depth, and one layer keeps the encoding short on a
CPU. Once every process has filled it, each writes its resident and proportional set sizes (PSS
splits a page that several processes map among them) to ``--output``/rank<R>.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from accelerate import PartialState
from million_items import cache_on_cpu, synthetic_texts, wide_random_encoder
from transformers import AutoTokenizer, BertForMaskedLM

from metricbert_trainer.base.distributed import process_group_closed_at_exit
from metricbert_trainer.base.modeling import DEFAULT_MODEL, resolve_model_name
from metricbert_trainer.data.token_rows import TokenRows
from metricbert_trainer.metricbert.guide import StartingModelGuide


def memory_gib() -> dict[str, float]:
    """This process's resident (Rss) and proportional (Pss) set sizes, in GiB."""
    fields = dict(
        line.split(":", 1)
        for line in Path("/proc/self/smaps_rollup").read_text().splitlines()[1:]
        if ":" in line
    )
    return {name.lower(): int(fields[name].split()[0]) / 2**20 for name in ("Rss", "Pss")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--texts", type=int, required=True)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    state = PartialState(cpu=True)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_name(DEFAULT_MODEL))
    guide = StartingModelGuide(wide_random_encoder(tokenizer, args.hidden, BertForMaskedLM))
    texts = synthetic_texts(args.texts)
    tokens = TokenRows.tokenize(tokenizer, texts, max_length=32)
    seconds = cache_on_cpu(guide, tokenizer, texts, tokens, max_length=32, batch_size=256)
    torch.distributed.barrier()  # every process holds its cache when each measures
    record = {
        "processes": state.num_processes,
        "seconds": seconds,
        "cache_gib": guide.cache_matrix().nbytes / 2**30,
        # A tree from before the shared cache (2026-11-30) has no cache_sharers: a copy each.
        "sharers": getattr(guide, "cache_sharers", 1),
        **memory_gib(),
    }
    # No process exits (and leaves the others' PSS a larger share of the cache) before all measured.
    torch.distributed.barrier()
    (args.output / f"rank{state.process_index}.json").write_text(json.dumps(record), encoding="utf-8")


if __name__ == "__main__":
    with process_group_closed_at_exit():
        main()
