"""The frozen guide in int8 (dynamic quantization of its Linear layers), against fp32, side by side.

    python benchmarks/guide_int8.py --batches 8 --rounds 3

The guide (``metricbert/guide.py``) only runs forwards, so its Linear layers could run as int8
matrix products with ``torch.ao.quantization.quantize_dynamic``, which CPUs without native bf16
(AVX2 only) execute through fbgemm. This measures what that would buy and what it would cost:
the median time of a guide forward over batches of 32 wine descriptions (max length 128) in fp32
and with each set of layers quantized, and the cosine between the int8 and the fp32 vectors of
the same texts (the guide's only job is to say which of two candidates is closer, so vectors that
move matter). The rows quantize every Linear layer, or all but the feed-forward output layers
(whose inputs carry BERT's outlier activations).
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch
from transformers import AutoTokenizer
from versus_sentence_transformers import cpu_name

from metricbert_trainer.base.modeling import DEFAULT_MODEL, load_masked_lm, resolve_model_name
from metricbert_trainer.base.pooling import mean_pool
from metricbert_trainer.data.catalog import load_catalog

CATALOG = "data/wines/winemag-sample-5811.csv"
BATCH_SIZE = 32
MAX_LENGTH = 128
# (label, which Linear layers to quantize, by a part of their module name)
QUANTIZED = [
    (
        "int8, every Linear layer",
        ("query", "key", "value", "attention.output.dense", "intermediate", "output.dense"),
    ),
    (
        "int8, all but the feed-forward output layers",
        ("query", "key", "value", "attention.output.dense", "intermediate"),
    ),
]


def quantized_guide(path: str, layer_names: tuple[str, ...]) -> torch.nn.Module:
    from torch.ao.quantization import quantize_dynamic

    encoder = load_masked_lm(path).base_model.eval()
    layers = {
        name
        for name, module in encoder.named_modules()
        if isinstance(module, torch.nn.Linear) and any(part in name for part in layer_names)
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch 2.13 marks the quantized tensor API deprecated
        return quantize_dynamic(encoder, layers, dtype=torch.qint8)


def timed_vectors(encoder: torch.nn.Module, batches: list[dict]) -> tuple[float, torch.Tensor]:
    """The median seconds of a forward over ``batches`` and the mean-pooled vectors of all of them."""
    durations, vectors = [], []
    with torch.inference_mode():
        for batch in batches:
            started = time.perf_counter()
            hidden = encoder(**batch).last_hidden_state
            vectors.append(mean_pool(hidden, batch["attention_mask"]))
            durations.append(time.perf_counter() - started)
    return statistics.median(durations), torch.cat(vectors)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args(argv)
    path = resolve_model_name(DEFAULT_MODEL)
    tokenizer = AutoTokenizer.from_pretrained(path)
    texts = load_catalog(CATALOG).dataset.shuffle(seed=0)["description"][: BATCH_SIZE * arguments.batches]
    batches = [
        tokenizer(
            texts[i : i + BATCH_SIZE],
            padding=True,
            truncation=True,
            max_length=MAX_LENGTH,
            return_tensors="pt",
        )
        for i in range(0, len(texts), BATCH_SIZE)
    ]
    encoders = {"fp32": load_masked_lm(path).base_model.eval()}
    encoders.update({label: quantized_guide(path, names) for label, names in QUANTIZED})
    seconds: dict[str, list[float]] = {label: [] for label in encoders}
    vectors: dict[str, torch.Tensor] = {}
    for _ in range(arguments.rounds):  # taking turns, so a machine that slows down slows all alike
        for label, encoder in encoders.items():
            duration, vectors[label] = timed_vectors(encoder, batches)
            seconds[label].append(duration)
    baseline = statistics.median(seconds["fp32"])
    print(
        f"\n{time.strftime('%Y-%m-%d')}, {cpu_name()}, {torch.get_num_threads()} threads, torch {torch.__version__}, "
        f"quantized engine {torch.backends.quantized.engine}; {len(texts)} wine descriptions, batch {BATCH_SIZE}\n"
    )
    print("| guide | ms per batch (median) | speed-up | cosine to fp32: min / mean |\n|---|---:|---:|---:|")
    for label in encoders:
        median = statistics.median(seconds[label])
        cosine = torch.nn.functional.cosine_similarity(vectors[label], vectors["fp32"])
        print(
            f"| {label} | {median * 1000:.1f} | {baseline / median:.2f} | {cosine.min():.3f} / {cosine.mean():.3f} |"
        )


if __name__ == "__main__":
    main()
