"""Training and encoding speed of this package against sentence-transformers, measured side by side.

    python benchmarks/versus_sentence_transformers.py train --rounds 2
    python benchmarks/versus_sentence_transformers.py encode --texts 4000 --rounds 3
    python benchmarks/versus_sentence_transformers.py --avx2_kernels train --rounds 3
    python benchmarks/versus_sentence_transformers.py --device cuda train --rounds 3 --steps 20

Same machine, model (all-MiniLM-L6-v2, the copy shipped on PyPI), data (the wine sample), batch
size (32 items) and max length (128) on both sides, in one process, the configurations taking
turns round after round so that a machine that slows down mid-run slows all of them alike.

``train``: items per second of an optimizer step (median over the measured steps of all rounds,
after ``--warmup`` steps per round and ``--warmup_rounds`` untimed rounds of every row) for this
package's trainer in its recipe configurations and for ``SentenceTransformerTrainer`` with
MultipleNegativesRankingLoss (anchor = title, positive = description) and with TripletLoss (a
random other item's description as the negative); the ratio of each row to the MNRL row of the
same precision, read from the trainer's arguments (the rows
labelled bf16 run under bf16 autocast on any CPU with bf16 instructions, AMX or AVX512-BF16; on
other CPUs they are left out). ``--device cuda`` runs both sides on the GPU, where every bf16 row
runs (under the GPU's bf16 autocast) and the fp32 rows stay fp32 (TF32 off, torch's default).

``encode``: texts per second of ``encoding.encode_texts`` against ``SentenceTransformer.encode``
on the same titles and descriptions, batch 32, at the same precision (fp32 on a CPU, bf16
autocast on a GPU); the median of ``--rounds``; the ratio. On a CPU with bf16 instructions both
also run under bf16 autocast (``encode_texts(precision="bf16")``, what ``--precision bf16`` of the
commands runs), with each side's bf16 rate beside its fp32 one; with ``--avx2_kernels`` too, where
they time what emulated bf16 costs a CPU without those instructions.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import torch
from datasets import Dataset
from step_timer import StepProfiler, StepTimer
from transformers import AutoTokenizer

from metricbert_trainer.base.modeling import DEFAULT_MODEL, load_masked_lm, resolve_model_name
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.evaluation.encoding import encode_texts
from metricbert_trainer.metricbert.config import MetricBertConfig
from metricbert_trainer.metricbert.trainer import MetricBertTrainer
from metricbert_trainer.scripts.arguments import DataArguments, ModelArguments, parse_recipe_args
from metricbert_trainer.training.config import has_bf16_instructions
from metricbert_trainer.training.trainer import CatalogTrainer

CATALOG = "data/wines/winemag-sample-5811.csv"
MNRL = "sentence-transformers: MultipleNegativesRankingLoss"
MNRL_BF16 = "sentence-transformers: MultipleNegativesRankingLoss, bf16 autocast"
# Every row's ratio is to the MNRL row of its own precision (both always run).
BASELINES = (MNRL, MNRL_BF16)
BATCH_SIZE = 32
# Optimizer steps ``--profile`` records in the first round, after the warm-up ones.
PROFILED_STEPS = 3
MAX_LENGTH = 128
NO_MLM = [
    "--mlm_weight", "0", "--mlm_probability", "0", "--mlm_head_warmup_steps", "0",
    "--mlm_weight_ramp_steps", "0", "--pooling_input", "masked",
]  # fmt: skip
FP32 = ["--cpu_bf16", "false", "--length_groups", "4"]  # as on a CPU without AMX
# The rows labelled bf16 run under bf16 autocast on any CPU with bf16 instructions, whether or not
# cpu_bf16 would choose it there (it does on AMX and on AMD Zen 5), so that both precisions can be compared.
BF16 = ["--bf16", "true"]
ON_CPU = ["--use_cpu", "true"]
# The recipes' previous default: the MLM pass for L_MLM, a second pass over the original text for the vectors.
UNMASKED_POOLING = ["--pooling_input", "unmasked"]
NO_CACHE = ["--guide_embedding_cache", "false"]  # the guide runs its forward every step
# The recipes' default before the hybrid teacher: batches drawn at random, no teacher term.
NO_TEACHER = ["--teacher_weight", "0", "--batch_neighbourhood_size", "0", "--teacher_shared_neighbours", "0"]
# A CPU with AVX2 only (no AVX-512, no native bf16), imitated on a newer one: ATen's vectorised
# ops, oneDNN and MKL's GEMMs each capped at AVX2. The libraries read these when they load.
AVX2_KERNELS = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
}


def length_groups(count: int) -> list[str]:
    """Each field encoded in ``count`` groups of similar length (``base.length_groups``)."""
    return ["--length_groups", str(count)]


# This package's configurations: (label, recipe config, command-line overrides). The recipes encode
# each field in 4 length groups (FP32 names it too, so the fp32 rows do not depend on the recipe);
# ONE_BATCH is one padded batch per field, as MNRL runs.
ONE_BATCH = length_groups(1)
# Both fields in one encoder pass (``joint_field_pass``), titles padded to the descriptions' width:
# half the kernel launches of a step, for an accelerator whose step the host's launches bound.
ONE_PASS = ONE_BATCH + ["--joint_field_pass", "true"]
# The training steps without the attention probabilities' dropout (``attention_dropout``), which on a CPU
# takes attention off its fused kernel.
NO_ATTENTION_DROPOUT = ["--attention_dropout", "false"]
# Rows that train with the dropout masks drawn by PyTorch's ``bernoulli_`` itself (``masks_from_bernoulli``),
# as before the trainers drew the same masks from a compiled kernel: that change side by side, in one process.
BERNOULLI = "dropout masks drawn by bernoulli_"
OURS = [
    (f"ours: default recipe (bf16), {BERNOULLI}", "recipes/wines/minilm.yaml", []),
    (f"ours: default recipe, fp32, {BERNOULLI}", "recipes/wines/minilm.yaml", FP32),
    (f"ours: default recipe without MLM (bf16), {BERNOULLI}", "recipes/wines/minilm.yaml", NO_MLM),
    (f"ours: default recipe without MLM, fp32, {BERNOULLI}", "recipes/wines/minilm.yaml", FP32 + NO_MLM),
    ("ours: default recipe (MLM, guard, filter, teacher; bf16 autocast)", "recipes/wines/minilm.yaml", []),
    ("ours: default recipe (bf16), one padded batch per field", "recipes/wines/minilm.yaml", ONE_BATCH),
    ("ours: default recipe (bf16), one pass for both fields", "recipes/wines/minilm.yaml", ONE_PASS),
    (
        "ours: default recipe (bf16), one pass for both fields, no attention dropout",
        "recipes/wines/minilm.yaml",
        ONE_PASS + NO_ATTENTION_DROPOUT,
    ),
    (
        "ours: default recipe (bf16), vectors from a second, unmasked pass",
        "recipes/wines/minilm.yaml",
        UNMASKED_POOLING,
    ),
    ("ours: default recipe, fp32", "recipes/wines/minilm.yaml", FP32),
    (
        "ours: default recipe, fp32, vectors from a second, unmasked pass",
        "recipes/wines/minilm.yaml",
        FP32 + UNMASKED_POOLING,
    ),
    ("ours: default recipe, fp32, one padded batch per field", "recipes/wines/minilm.yaml", FP32 + ONE_BATCH),
    ("ours: default recipe, fp32, one pass for both fields", "recipes/wines/minilm.yaml", FP32 + ONE_PASS),
    (
        "ours: default recipe, fp32, one pass for both fields, no attention dropout",
        "recipes/wines/minilm.yaml",
        FP32 + ONE_PASS + NO_ATTENTION_DROPOUT,
    ),
    (
        "ours: default recipe, fp32, one pass for both fields in 4 length groups",
        "recipes/wines/minilm.yaml",
        FP32 + ["--joint_field_pass", "true"],
    ),
    ("ours: default recipe, fp32, no guide cache", "recipes/wines/minilm.yaml", FP32 + NO_CACHE),
    ("ours: default recipe, fp32, without the teacher", "recipes/wines/minilm.yaml", FP32 + NO_TEACHER),
    ("ours: default recipe without the teacher (bf16)", "recipes/wines/minilm.yaml", NO_TEACHER),
    ("ours: default recipe without MLM, fp32", "recipes/wines/minilm.yaml", FP32 + NO_MLM),
    *[
        (
            f"ours: default recipe without MLM, fp32, {label}",
            "recipes/wines/minilm.yaml",
            FP32 + NO_MLM + overrides,
        )
        for label, overrides in (
            ("one padded batch per field", ONE_BATCH),
            ("one pass for both fields", ONE_PASS),
            ("2 length groups", length_groups(2)),
            ("8 length groups", length_groups(8)),
            ("no guide cache", NO_CACHE),
            ("torch.compile", ["--torch_compile", "true"]),
        )
    ],
    (
        "ours: no MLM, no guide, one padded batch per field, fp32 (the same work as MNRL)",
        "recipes/wines/minilm.yaml",
        FP32
        + NO_MLM
        + ONE_BATCH
        + NO_TEACHER
        + ["--false_negative_filter", "false", "--guide_diagnostics", "false", "--distill_weight", "0"],
    ),
    ("ours: default recipe without MLM (bf16)", "recipes/wines/minilm.yaml", NO_MLM),
    (
        "ours: default recipe without MLM (bf16), one pass for both fields",
        "recipes/wines/minilm.yaml",
        NO_MLM + ONE_PASS,
    ),
    ("ours: paper objective (MLM + triplet; bf16)", "recipes/wines/paper.yaml", []),
    ("ours: paper objective, fp32, one padded batch per field", "recipes/wines/paper.yaml", FP32 + ONE_BATCH),
    ("ours: paper objective, fp32, 4 length groups", "recipes/wines/paper.yaml", FP32),
]


@contextlib.contextmanager
def masks_from_bernoulli():
    """Inside, the trainers leave their models' dropout as PyTorch draws it (``bernoulli_`` on one
    core), as they did before they drew the same masks from a compiled kernel."""
    drawn = CatalogTrainer.cpu_dropout_masks
    CatalogTrainer.cpu_dropout_masks = lambda self: contextlib.nullcontext()
    try:
        yield
    finally:
        CatalogTrainer.cpu_dropout_masks = drawn


def our_trainer(
    config_path: str,
    overrides: list[str],
    items: Dataset,
    steps: int,
    output_dir: str,
    timer: StepTimer,
    max_length: int | None = MAX_LENGTH,
):
    """The trainer of ``config_path`` with ``overrides`` on ``items`` for ``steps`` steps, timed by
    ``timer``; ``max_length`` None keeps the recipe's own length."""
    model_args, data_args, args = parse_recipe_args(
        (ModelArguments, DataArguments, MetricBertConfig),
        ["--config", config_path, "--output_dir", output_dir, *overrides],
    )
    args = dataclasses.replace(
        args,
        per_device_train_batch_size=BATCH_SIZE,
        max_length=args.max_length if max_length is None else max_length,
        max_steps=steps,
        save_strategy="no",
        eval_strategy="no",
        report_to="none",
        logging_steps=steps,
        disable_tqdm=True,
        # The head-only warm-up runs before the timed steps; two batches keep the rounds short.
        mlm_head_warmup_steps=min(args.mlm_head_warmup_steps, 2),
    )
    path = resolve_model_name(model_args.model_name_or_path)
    return MetricBertTrainer(
        model=load_masked_lm(path),
        args=args,
        train_dataset=items,
        processing_class=AutoTokenizer.from_pretrained(path),
        callbacks=[timer],
    )


def sentence_transformers_trainer(
    loss_name: str,
    items: Dataset,
    steps: int,
    output_dir: str,
    timer: StepTimer,
    bf16: bool = False,
    device: str = "cpu",
):
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
        losses,
    )

    model = SentenceTransformer(resolve_model_name(DEFAULT_MODEL), device=device)
    model.max_seq_length = MAX_LENGTH
    if loss_name == "mnrl":
        dataset = Dataset.from_dict({"anchor": items["title"], "positive": items["description"]})
        loss = losses.MultipleNegativesRankingLoss(model)
    else:
        shuffled = torch.randperm(len(items), generator=torch.Generator().manual_seed(1)).tolist()
        descriptions = items["description"]
        dataset = Dataset.from_dict(
            {
                "anchor": items["title"],
                "positive": descriptions,
                "negative": [descriptions[i] for i in shuffled],
            }
        )
        loss = losses.TripletLoss(model)
    args = SentenceTransformerTrainingArguments(
        output_dir=output_dir,
        per_device_train_batch_size=BATCH_SIZE,
        max_steps=steps,
        learning_rate=2e-5,
        warmup_steps=0.1,
        save_strategy="no",
        report_to="none",
        logging_steps=steps,
        disable_tqdm=True,
        use_cpu=device == "cpu",
        bf16=bf16,
        seed=42,
    )
    return SentenceTransformerTrainer(
        model=model, args=args, train_dataset=dataset, loss=loss, callbacks=[timer]
    )


def run_training(arguments: argparse.Namespace) -> None:
    if arguments.profile and arguments.steps <= PROFILED_STEPS:
        raise SystemExit(
            f"--profile leaves its {PROFILED_STEPS} profiled steps untimed: pass --steps above that."
        )
    torch.manual_seed(0)
    catalog = load_catalog(CATALOG)
    shuffled = catalog.dataset.shuffle(seed=0)
    per_round = BATCH_SIZE * (arguments.warmup + arguments.steps)
    if arguments.fresh_items and per_round * (arguments.warmup_rounds + arguments.rounds) > len(shuffled):
        raise SystemExit(
            f"--fresh_items needs {per_round} new items a round; the catalog has {len(shuffled)}."
        )

    def round_items(round_index: int) -> Dataset:
        """The items a round trains on: the same every round, or with ``--fresh_items`` items no
        earlier round of the process saw (so that each step's batch shapes are new to it)."""
        first = (round_index + arguments.warmup_rounds) * per_round if arguments.fresh_items else 0
        return shuffled.select(range(first, first + per_round))

    device = arguments.device
    placement = ON_CPU if device == "cpu" else []
    configurations: list[tuple[str, Callable]] = [
        (
            label,
            lambda out, timer, items, c=config, o=overrides + placement + (BF16 if "bf16" in label else []): (
                our_trainer(c, o, items, total, out, timer)
            ),
        )
        for label, config, overrides in OURS
    ]
    total = arguments.warmup + arguments.steps
    configurations += [
        (
            MNRL,
            lambda out, timer, items: sentence_transformers_trainer(
                "mnrl", items, total, out, timer, device=device
            ),
        ),
        (
            "sentence-transformers: TripletLoss",
            lambda out, timer, items: sentence_transformers_trainer(
                "triplet", items, total, out, timer, device=device
            ),
        ),
        (
            MNRL_BF16,
            lambda out, timer, items: sentence_transformers_trainer(
                "mnrl", items, total, out, timer, bf16=True, device=device
            ),
        ),
    ]
    if arguments.only:
        configurations = [
            (label, build)
            for label, build in configurations
            if label in BASELINES or any(part in label for part in arguments.only)
        ]
    if arguments.avx2_kernels or (device == "cpu" and not has_bf16_instructions()):
        # Without bf16 instructions autocast emulates bf16: the rows would time what nobody runs.
        configurations = [(label, build) for label, build in configurations if "bf16" not in label]
    if arguments.skip:
        configurations = [
            (label, build)
            for label, build in configurations
            if label in BASELINES or not any(part in label for part in arguments.skip)
        ]
    measured: dict[str, list[float]] = {label: [] for label, _ in configurations}
    cache_seconds: dict[str, list[float]] = {label: [] for label, _ in configurations}
    precision: dict[str, str] = {}
    # Rounds below 0 warm the process up and are not timed (``--warmup_rounds``).
    for round_index in range(-arguments.warmup_rounds, arguments.rounds):
        for label, build in configurations:
            timer = StepTimer()
            profiled = bool(arguments.profile) and round_index == 0
            with tempfile.TemporaryDirectory() as output_dir:
                trainer = build(output_dir, timer, round_items(round_index))
                if profiled:
                    os.makedirs(arguments.profile, exist_ok=True)
                    slug = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")[:80]
                    trainer.add_callback(
                        StepProfiler(
                            os.path.join(arguments.profile, f"{slug}.txt"),
                            first=arguments.warmup,
                            count=PROFILED_STEPS,
                        )
                    )
                precision[label] = "bf16" if trainer.args.bf16 else "fp32"
                spent = time_guide_cache(trainer)
                with masks_from_bernoulli() if BERNOULLI in label else contextlib.nullcontext():
                    trainer.train()
            # The profiled steps run slower (the profiler records every operator): not timed.
            timed = timer.durations[arguments.warmup + (PROFILED_STEPS if profiled else 0) :]
            if round_index >= 0:
                measured[label] += timed
                cache_seconds[label].append(sum(spent))
            print(
                ("warm-up round" if round_index < 0 else f"round {round_index + 1}")
                + f": {label}: {BATCH_SIZE / statistics.median(timed):.2f} items/s"
                + (f", guide cache {sum(spent):.2f} s" if spent else ""),
                flush=True,
            )
    rates = {label: BATCH_SIZE / statistics.median(durations) for label, durations in measured.items()}
    # One epoch over the items: every step's cost plus the guide cache's one pass over them.
    epoch_rates = {
        label: 1 / (1 / rates[label] + statistics.median(cache_seconds[label]) / per_round) for label in rates
    }
    baseline = {precision[label]: rates[label] for label in BASELINES if label in rates}
    print(
        header(
            arguments,
            f"{arguments.rounds} rounds x {arguments.steps} measured steps ({arguments.warmup} warm-up steps per round, "
            f"after {arguments.warmup_rounds} untimed round{'s' if arguments.warmup_rounds != 1 else ''})"
            + ("; each round on items no earlier round saw" if arguments.fresh_items else ""),
        )
    )
    print(
        "| trainer | precision (measured) | items/s (median step) | ratio to ST MNRL at the same precision "
        "| items/s over one epoch, guide cache included | ratio |\n|---|---|---:|---:|---:|---:|"
    )
    for label, rate in rates.items():
        same = baseline[precision[label]]
        print(
            f"| {label} | {precision[label]} | {rate:.2f} | {rate / same:.2f} | {epoch_rates[label]:.2f} "
            f"| {epoch_rates[label] / same:.2f} |"
        )


def time_guide_cache(trainer) -> list[float]:
    """Records the wall time of the trainer's guide cache (``guide_embedding_cache``), built once
    before the first step and so outside the step timer; empty when the run builds none."""
    spent: list[float] = []
    guide = getattr(trainer, "guide", None)
    if guide is None:
        return spent
    build = guide.cache_embeddings

    def timed(*arguments, **keywords):
        started = time.perf_counter()
        build(*arguments, **keywords)
        spent.append(time.perf_counter() - started)

    guide.cache_embeddings = timed
    return spent


def run_encoding(arguments: argparse.Namespace) -> None:
    from sentence_transformers import SentenceTransformer

    catalog = load_catalog(CATALOG)
    half = arguments.texts // 2
    texts = catalog.texts("title")[:half] + catalog.texts("description")[:half]
    path = resolve_model_name(DEFAULT_MODEL)
    ours, tokenizer = load_masked_lm(path), AutoTokenizer.from_pretrained(path)
    theirs = SentenceTransformer(path, device=arguments.device)
    ours.to(arguments.device)
    theirs.max_seq_length = MAX_LENGTH
    sides = {
        "ours: encode_texts": lambda: encode_texts(
            ours, tokenizer, texts, batch_size=BATCH_SIZE, max_length=MAX_LENGTH
        ),
        "sentence-transformers: encode": lambda: same_precision(arguments.device)(theirs.encode)(
            texts, batch_size=BATCH_SIZE, convert_to_numpy=True
        ),
    }
    cpu_bf16 = arguments.device == "cpu" and has_bf16_instructions()
    if cpu_bf16:
        sides |= {
            "ours: encode_texts, bf16 autocast": lambda: encode_texts(
                ours, tokenizer, texts, batch_size=BATCH_SIZE, max_length=MAX_LENGTH, precision="bf16"
            ),
            "sentence-transformers: encode, bf16 autocast": lambda: torch.autocast(
                "cpu", dtype=torch.bfloat16
            )(theirs.encode)(texts, batch_size=BATCH_SIZE, convert_to_numpy=True),
        }
    times: dict[str, list[float]] = {label: [] for label in sides}
    for _ in range(arguments.rounds):
        for label, encode in sides.items():
            started = time.perf_counter()
            encode()
            times[label].append(time.perf_counter() - started)
    rates = {label: len(texts) / statistics.median(values) for label, values in times.items()}
    print(
        header(
            arguments, f"{len(texts)} texts (titles and descriptions), median of {arguments.rounds} rounds"
        )
    )
    print(
        "| encoder | texts/s | ratio to ST at the same precision | ratio to its own fp32 row |\n|---|---:|---:|---:|"
    )
    for label, rate in rates.items():
        precision = ", bf16 autocast" if label.endswith(", bf16 autocast") else ""
        side = label.removesuffix(precision)
        same = rates["sentence-transformers: encode" + precision]
        own = f"{rate / rates[side]:.2f}" if precision else "1.00"
        print(f"| {label} | {rate:.1f} | {rate / same:.2f} | {own} |")


def same_precision(device: str) -> Callable:
    """Runs sentence-transformers' encode under the precision ``encode_texts`` uses there: bf16
    autocast on a GPU, fp32 on a CPU."""
    if device == "cpu":
        return lambda encode: encode
    return torch.autocast(device, dtype=torch.bfloat16)


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            return next(line.split(":", 1)[1].strip() for line in handle if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


def avx2_kernels_set() -> bool:
    """Whether this process was started with every library capped at AVX2 (``AVX2_KERNELS``)."""
    return all(os.environ.get(name) == value for name, value in AVX2_KERNELS.items())


def kernels() -> str:
    """The instruction set of ATen's kernels, and whether MKL and oneDNN were capped to AVX2."""
    return f"{torch.backends.cpu.get_cpu_capability()} kernels" + (
        " (MKL and oneDNN capped at AVX2)" if avx2_kernels_set() else ""
    )


def restart_with_avx2_kernels() -> None:
    """Run this command again in a process whose libraries load with AVX2 kernels only."""
    if not avx2_kernels_set():
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **AVX2_KERNELS})


def machine(arguments: argparse.Namespace) -> str:
    """The device the rows ran on: the GPU's name, or the CPU's with its kernels and threads."""
    if arguments.device == "cuda":
        return f"{torch.cuda.get_device_name()} (CPU {cpu_name()})"
    return f"{cpu_name()}, {kernels()}, {torch.get_num_threads()} threads"


def header(arguments: argparse.Namespace, what: str) -> str:
    return (
        f"\n{time.strftime('%Y-%m-%d')}, {machine(arguments)}, "
        f"torch {torch.__version__}; all-MiniLM-L6-v2, wine sample, batch {BATCH_SIZE}, max length {MAX_LENGTH}; {what}\n"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--avx2_kernels",
        action="store_true",
        help="Imitate a CPU with AVX2 only (ATen, oneDNN and MKL capped at AVX2); train runs the fp32 rows only.",
    )
    parser.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default="cpu",
        help="Where both sides train and encode: the CPU, or the GPU (every bf16 row runs there).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train")
    train.add_argument("--rounds", type=int, default=2)
    train.add_argument("--warmup", type=int, default=2)
    train.add_argument(
        "--warmup_rounds",
        type=int,
        default=1,
        help="Untimed rounds of every row first: the first row a process trains otherwise pays its one-time "
        "costs (on an AMX Xeon its first round ran at 0.75 of its later ones, 2026-12-07).",
    )
    train.add_argument("--steps", type=int, default=8)
    train.add_argument(
        "--fresh_items",
        action="store_true",
        help="Train each round (the untimed ones too) on items no earlier round saw, as a run's first epoch "
        "does: every batch's shapes are new to the process (on a CPU under bf16 oneDNN builds kernels for each "
        "new shape). By default every round trains on the same items, whose shapes later rounds have seen.",
    )
    train.add_argument(
        "--only",
        nargs="+",
        default=None,
        help="Run the rows whose label contains one of these (MNRL always runs).",
    )
    train.add_argument(
        "--skip",
        nargs="+",
        default=None,
        help="Leave out the rows whose label contains one of these (MNRL always runs).",
    )
    train.add_argument(
        "--profile",
        default=None,
        help=f"Folder for a torch.profiler table of each row's first {PROFILED_STEPS} steps after the warm-up "
        "(first round only; those steps are not timed, so --steps must exceed them).",
    )
    train.set_defaults(run=run_training)
    encode = commands.add_parser("encode")
    encode.add_argument("--texts", type=int, default=4000)
    encode.add_argument("--rounds", type=int, default=3)
    encode.set_defaults(run=run_encoding)
    parser.add_argument(
        "--no_cudnn_attention",
        action="store_true",
        help="Leave cuDNN out of scaled-dot-product attention on the GPU (both sides): its plans are built per shape.",
    )
    arguments = parser.parse_args(argv)
    if arguments.no_cudnn_attention:
        torch.backends.cuda.enable_cudnn_sdp(False)
    if arguments.avx2_kernels:
        restart_with_avx2_kernels()
    arguments.run(arguments)


if __name__ == "__main__":
    main()
