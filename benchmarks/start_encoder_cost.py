"""What a starting encoder costs the catalog recipe per optimizer step, measured side by side.

    python benchmarks/start_encoder_cost.py --starts sentence-transformers/all-MiniLM-L6-v2 \
        outputs/encoders/all-mpnet-base-v2 --catalog data/csfcube/catalog.csv

Issue #88 item 3 asks for the starting encoder's time per step beside its rankings: a larger
start may rank an expert's pools better and still not fit the issue's 20 minutes a run on 2
cores. Each start trains the catalog recipe (recipes/catalog/minilm.yaml, every setting as a user
gets it but the start) on the same items of the catalog, shuffled with seed 0, at the recipe's
batch size and length, the starts taking turns round after round; printed: the median step of
each, its ratio to the first start's, and the guide cache's seconds per item (its one pass over
the items before the first step). The MLM head's warm-up is cut to two batches, as in
versus_sentence_transformers.py.

The ratio is the measurement; seconds are not a whole run's. On a hundred-odd items a step and the
cache's pass cost more than in a run over the catalog (CSFCube on an AMD EPYC Zen 4: 12.0 s a
MiniLM step here against 6.2 s over a whole run's 132 steps, train_runtime 814 s): a whole run's
time is its train_runtime, and another start's is projected from it by the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

import torch
from step_timer import StepTimer
from versus_sentence_transformers import BATCH_SIZE, cpu_name, our_trainer, time_guide_cache

from metricbert_trainer.base.modeling import DEFAULT_MODEL
from metricbert_trainer.data.catalog import load_catalog

RECIPE = "recipes/catalog/minilm.yaml"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", nargs="+", default=[DEFAULT_MODEL])
    parser.add_argument("--catalog", default="data/csfcube/catalog.csv")
    parser.add_argument("--warmup", type=int, default=2, help="Untimed steps of every round.")
    parser.add_argument("--steps", type=int, default=4, help="Timed steps of every round.")
    parser.add_argument("--rounds", type=int, default=2)
    arguments = parser.parse_args(argv)
    torch.manual_seed(0)
    catalog = load_catalog(arguments.catalog)
    total = arguments.warmup + arguments.steps
    items = catalog.dataset.shuffle(seed=0).select(range(BATCH_SIZE * total))
    steps: dict[str, list[float]] = {start: [] for start in arguments.starts}
    cache: dict[str, list[float]] = {start: [] for start in arguments.starts}
    for round_index in range(arguments.rounds):
        for start in arguments.starts:
            timer = StepTimer()
            # The recipe's own length (256 tokens on CSFCube's abstracts), fp32 as the quality tables train.
            overrides = ["--model_name_or_path", start, "--catalog", arguments.catalog]
            overrides += ["--cpu_bf16", "false", "--eval_on_start", "false"]
            with tempfile.TemporaryDirectory() as output_dir:
                trainer = our_trainer(RECIPE, overrides, items, total, output_dir, timer, max_length=None)
                spent = time_guide_cache(trainer)
                trainer.train()
            timed = timer.durations[arguments.warmup :]
            steps[start] += timed
            cache[start].append(sum(spent) / len(items))
            print(f"round {round_index + 1}: {start}: {statistics.median(timed):.2f} s a step", flush=True)
    print(
        f"\n{cpu_name()}, {torch.get_num_threads()} threads, torch {torch.__version__}; {len(items)} items of "
        f"{arguments.catalog}; {arguments.rounds} rounds x {arguments.steps} timed steps of {BATCH_SIZE} "
        f"items after {arguments.warmup} untimed, fp32\n"
    )
    print("| start | s a step (median) | ratio to the first | guide cache, s an item |\n|---|---:|---:|---:|")
    first = statistics.median(steps[arguments.starts[0]])
    for start in arguments.starts:
        step = statistics.median(steps[start])
        print(f"| {start} | {step:.2f} | {step / first:.2f} | {statistics.median(cache[start]):.4f} |")


if __name__ == "__main__":
    main()
