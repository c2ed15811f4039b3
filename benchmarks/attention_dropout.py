"""What dropout on the attention probabilities costs the encoder on a CPU, side by side in one run.

    python benchmarks/attention_dropout.py --catalog data/debian/debian-packages-4000.csv
    python benchmarks/attention_dropout.py --catalog data/wines/winemag-sample-5811.csv

On a CPU, scaled-dot-product attention with a dropout probability above 0 leaves its fused kernel
for the unfused one, which builds each attention matrix, its softmax and a dropout mask. The
MLM-head warm-up encodes its token budget with the attention dropout off for that reason
(``base.attention.attention_dropout_off``); the joint training steps still pay it. For batches of the
catalog's descriptions (32 texts, 4 length groups, at the ``max_length`` the recipes choose from
the catalog) this times all-MiniLM-L6-v2 in three modes, each as the median over the batches,
rounds interleaved: eval (no dropout), train (every dropout on) and train with the attention
dropout off; both a no-grad forward (what the warm-up's encoding runs) and a forward and backward
of the mean-pooled vectors (what a training step runs per field).
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import nullcontext

import torch
from transformers import AutoModel, AutoTokenizer
from versus_sentence_transformers import cpu_name, kernels

from metricbert_trainer.base.attention import attention_dropout_off
from metricbert_trainer.base.length_groups import group_inputs, split_by_length
from metricbert_trainer.base.modeling import resolve_model_name
from metricbert_trainer.base.pooling import mean_pool
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.data.lengths import data_driven_max_length

BATCH_SIZE = 32
LENGTH_GROUPS = 4
MODES = ("eval", "train", "train, attention dropout off")


def set_mode(model: torch.nn.Module, mode: str):
    """``model`` in ``mode``; the context that keeps the attention dropout off, or a no-op one."""
    model.train(mode != "eval")
    return attention_dropout_off(model) if mode == MODES[2] else nullcontext()


def encode(model, batch, backward: bool) -> None:
    with torch.set_grad_enabled(backward):
        for rows in split_by_length(batch["attention_mask"], LENGTH_GROUPS):
            group = group_inputs(batch, rows)
            hidden = model(**group).last_hidden_state
            if backward:
                mean_pool(hidden, group["attention_mask"]).pow(2).sum().backward()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--catalog", default="data/debian/debian-packages-4000.csv")
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    options = parser.parse_args(argv)
    torch.manual_seed(0)
    path = resolve_model_name("sentence-transformers/all-MiniLM-L6-v2")
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path)
    catalog = load_catalog(options.catalog)
    max_length = data_driven_max_length(tokenizer, {field: catalog.texts(field) for field in catalog.fields})
    texts = catalog.texts("description")
    order = torch.randperm(len(texts), generator=torch.Generator().manual_seed(0)).tolist()
    batches = [
        dict(tokenizer([texts[i] for i in order[start : start + BATCH_SIZE]], padding=True, truncation=True,
                       max_length=max_length, return_tensors="pt"))
        for start in range(0, BATCH_SIZE * options.batches, BATCH_SIZE)
    ]  # fmt: skip
    seconds = {(mode, backward): [] for mode in MODES for backward in (False, True)}
    for _ in range(options.rounds):
        for backward in (False, True):
            for mode in MODES:
                with set_mode(model, mode):
                    for batch in batches:
                        started = time.perf_counter()
                        encode(model, batch, backward)
                        seconds[mode, backward].append(time.perf_counter() - started)
                model.zero_grad(set_to_none=True)
    print(
        f"\n{options.catalog}; {cpu_name()}, {kernels()}, {torch.get_num_threads()} threads; fp32; "
        f"batches of {BATCH_SIZE} descriptions, max_length {max_length}, {LENGTH_GROUPS} length groups; "
        f"median of {options.rounds} x {options.batches} batches\n"
    )
    print(
        "| mode | forward, no grad (s a batch) | ratio to eval | forward + backward (s a batch) | ratio to eval |"
    )
    print("|---|---:|---:|---:|---:|")
    base_forward, base_both = (statistics.median(seconds["eval", backward]) for backward in (False, True))
    for mode in MODES:
        forward, both = (statistics.median(seconds[mode, backward]) for backward in (False, True))
        print(
            f"| {mode} | {forward:.3f} | {forward / base_forward:.2f} | {both:.3f} | {both / base_both:.2f} |"
        )


if __name__ == "__main__":
    main()
