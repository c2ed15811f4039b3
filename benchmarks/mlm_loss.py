"""The MLM term's head and loss, forward and backward, as the trainer computed it before and now.

    python benchmarks/mlm_loss.py --steps 30 --rounds 3

all-MiniLM-L6-v2's MLM head (the decoder tied to the word embeddings, as the recipes train it) on
the masked tokens of ``--steps`` real wine batches of 32 items, masked as the default recipe masks
them (``mlm_probability``, both fields): each step's number of masked tokens is that batch's, so it
changes from step to step as in training. Two ways, taking turns round after round:

- ``plain``: ``F.cross_entropy(head(hidden).float(), targets)``, the loss before 2026-12-07;
- ``fused``: ``vocabulary_loss.head_cross_entropy``, the decoder's product and the cross-entropy in
  one step, its rows padded to a multiple of 64.

It prints the median milliseconds a step (forward and backward, the head's gradients included) of
the first round, whose every shape is new to oneDNN's kernel cache as most steps of a first epoch
are, and of the later rounds, which repeat the first round's shapes; in fp32 and, on a CPU with bf16
instructions, under bf16 autocast.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from transformers import AutoTokenizer
from versus_sentence_transformers import CATALOG, cpu_name, kernels

from metricbert_trainer.base.modeling import DEFAULT_MODEL, find_mlm_head, load_masked_lm, resolve_model_name
from metricbert_trainer.base.vocabulary_loss import head_cross_entropy
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.metricbert.collator import MetricBertCollator
from metricbert_trainer.metricbert.config import MetricBertConfig
from metricbert_trainer.training.config import has_bf16_instructions

BATCH_SIZE = 32


def masked_token_counts(tokenizer, steps: int) -> list[int]:
    """How many tokens the default recipe's collator masks in each of ``steps`` wine batches."""
    items = load_catalog(CATALOG).dataset.shuffle(seed=0)
    collator = MetricBertCollator(tokenizer, mlm_probability=MetricBertConfig.mlm_probability, seed=0)
    counts = []
    for step in range(steps):
        batch = collator([items[row] for row in range(step * BATCH_SIZE, (step + 1) * BATCH_SIZE)])
        counts.append(sum(int((batch[f"{name}_labels"] != -100).sum()) for name in ("title", "description")))
    return counts


def one_step(model, head, hidden: torch.Tensor, targets: torch.Tensor, way: str, bf16: bool) -> float:
    """Seconds of one forward and backward of the head and its loss."""
    hidden = hidden.clone().requires_grad_()
    started = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        if way == "fused":
            loss = head_cross_entropy(model, head, hidden, targets)
        else:
            loss = F.cross_entropy(head(hidden).float(), targets)
    loss.backward()
    spent = time.perf_counter() - started
    model.zero_grad(set_to_none=True)
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    path = resolve_model_name(DEFAULT_MODEL)
    model = load_masked_lm(path).train()
    head = find_mlm_head(model)
    counts = masked_token_counts(AutoTokenizer.from_pretrained(path), arguments.steps)
    generator = torch.Generator().manual_seed(0)
    inputs = [
        (
            torch.randn(count, model.config.hidden_size, generator=generator),
            torch.randint(0, model.config.vocab_size, (count,), generator=generator),
        )
        for count in counts
    ]
    print(
        f"{time.strftime('%Y-%m-%d')}, {cpu_name()}, {kernels()}, {torch.get_num_threads()} threads, "
        f"torch {torch.__version__}; all-MiniLM-L6-v2's MLM head; {arguments.steps} wine batches of "
        f"{BATCH_SIZE}, {min(counts)} to {max(counts)} masked tokens a step ({len(set(counts))} distinct); "
        f"{arguments.rounds} rounds, the ways taking turns"
    )
    print("\n| precision | way | ms a step, first round (new shapes) | later rounds (shapes seen) |")
    print("|---|---|---:|---:|")
    for bf16 in [False, True] if has_bf16_instructions() else [False]:
        times: dict[str, list[list[float]]] = {"plain": [], "fused": []}
        for _ in range(arguments.rounds):
            for way in times:
                times[way].append([one_step(model, head, *step, way=way, bf16=bf16) for step in inputs])
        for way, rounds in times.items():
            later = [spent for spent_round in rounds[1:] for spent in spent_round]
            print(
                f"| {'bf16' if bf16 else 'fp32'} | {way} | {1e3 * statistics.median(rounds[0]):.1f} "
                f"| {1e3 * statistics.median(later):.1f} |"
            )


if __name__ == "__main__":
    main()
