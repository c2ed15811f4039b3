"""What drawing a training step's dropout masks costs on a CPU, and what the trainers' kernel saves.

    python benchmarks/dropout_masks.py --rounds 5

The profile of a default bf16 step on an AMX Xeon (benchmarks/RESULTS.md, issue #92) put
``aten::bernoulli_`` second after the matrix products: once the products run on AMX tiles, the
masks of dropout are about an eighth of the step. PyTorch draws each mask element from the CPU's
Mersenne Twister, one 32-bit draw per element. This benchmark finds the masks a step draws (every
``bernoulli_`` of a forward of the wines recipe's titles and descriptions, 32 items in 4 length
groups, the model in train mode, as ``torch.profiler`` records their shapes) and times, rounds
interleaved, two ways of drawing the scaled masks (fp32): ``bernoulli_(0.9).div_(0.9)`` as
PyTorch's dropout draws them, and ``base.bernoulli_masks.scaled_keep_mask``, the same masks bit for
bit from the compiled kernel the trainers use on a CPU (compiled before the rounds). Only the masks
are timed; the product with them is the same either way. (Until commit 515e048 a third way, two
elements from each 31-bit draw, other masks, was timed too: 0.46x of ``bernoulli_`` against the
kernel's 0.17x, ``benchmarks/results/xeon-amx-167-2026-12-07-masks/dropout_masks.md``.)
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import AutoModel, AutoTokenizer
from versus_sentence_transformers import cpu_name, kernels

from metricbert_trainer.base.bernoulli_masks import mask_kernel, scaled_keep_mask
from metricbert_trainer.base.length_groups import group_inputs, split_by_length
from metricbert_trainer.base.modeling import DEFAULT_MODEL, resolve_model_name
from metricbert_trainer.data.catalog import load_catalog

CATALOG = "data/wines/winemag-sample-5811.csv"
BATCH_SIZE = 32
LENGTH_GROUPS = 4
MAX_LENGTH = 128
KEEP = 0.9


def step_mask_shapes(model, tokenizer, titles: list[str], descriptions: list[str]) -> list[tuple]:
    """The shape of every mask one forward of both fields draws, in train mode."""
    model.train()
    with torch.profiler.profile(record_shapes=True) as profile, torch.no_grad():
        for texts in (titles, descriptions):
            inputs = tokenizer(
                texts, padding=True, truncation=True, max_length=MAX_LENGTH, return_tensors="pt"
            )
            for rows in split_by_length(inputs["attention_mask"], LENGTH_GROUPS):
                model(**group_inputs(dict(inputs), rows))
    return [tuple(event.input_shapes[0]) for event in profile.events() if event.name == "aten::bernoulli_"]


def bernoulli_masks(shapes: list[tuple]) -> None:
    for shape in shapes:
        torch.empty(shape).bernoulli_(KEEP).div_(KEEP)


def kernel_masks(shapes: list[tuple]) -> None:
    for shape in shapes:
        scaled_keep_mask(torch.empty(shape), KEEP)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    arguments = parser.parse_args()
    path = resolve_model_name(DEFAULT_MODEL)
    catalog = load_catalog(CATALOG).dataset.shuffle(seed=0).select(range(BATCH_SIZE))
    shapes = step_mask_shapes(
        AutoModel.from_pretrained(path),
        AutoTokenizer.from_pretrained(path),
        list(catalog["title"]),
        list(catalog["description"]),
    )
    elements = sum(torch.Size(shape).numel() for shape in shapes)
    if mask_kernel() is None:  # compiled (or loaded from numba's cache) here, outside the rounds
        raise SystemExit("The mask kernel is not available (numba missing, or its check failed).")
    ways = {
        "bernoulli_ (PyTorch's dropout)": bernoulli_masks,
        "the same masks from the compiled kernel (base/bernoulli_masks.py)": kernel_masks,
    }
    seconds: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(arguments.rounds):
        for name, draw in ways.items():
            started = time.perf_counter()
            draw(shapes)
            seconds[name].append(time.perf_counter() - started)
    print(f"# {cpu_name()}, {torch.get_num_threads()} threads, torch {torch.__version__}, {kernels()}")
    print(
        f"# one forward of {BATCH_SIZE} titles and descriptions in {LENGTH_GROUPS} length groups draws "
        f"{len(shapes)} masks, {elements / 1e6:.1f} M elements; median of {arguments.rounds} rounds"
    )
    print("| masks drawn by | ms a forward | ratio |\n|---|---:|---:|")
    reference = statistics.median(seconds["bernoulli_ (PyTorch's dropout)"])
    for name, spent in seconds.items():
        median = statistics.median(spent)
        print(f"| {name} | {median * 1e3:.1f} | {median / reference:.2f} |")


if __name__ == "__main__":
    main()
