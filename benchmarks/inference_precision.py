"""`metricbert evaluate --precision fp32` against `--precision bf16`, on every benchmark we hold.

    python benchmarks/inference_precision.py [--models "wines=MetricBERT=outputs/wines-minilm" ...]

bf16 autocast encodes 1.5 (Zen 4) to 2.3 (Zen 5) times as fast as fp32 on a CPU with AVX512-BF16
or AMX (``versus_sentence_transformers.py encode``), and rounds every vector: this measures what that
does to the rankings users get, with the commands' default ranking (the encoder fused with
TF-IDF, re-ranked by shared neighbours) on the held-out test seeds of the wine sample and the
Debian catalog, each in its plain and its masked view. Each call is the command as a user runs
it, in a fresh process, its wall time beside its metrics; the two precisions alternate, so a
machine that slows down slows both. The zero-shot default encoder runs on every benchmark;
``--models DOMAIN=NAME=PATH`` adds a trained model on one domain's two views.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from versus_sentence_transformers import cpu_name

BENCHMARKS = {
    "wines": (
        "data/wines/proxy-annotations-test-500-seeds.csv",
        {
            "plain": "data/wines/winemag-sample-5811.csv",
            "masked": "data/wines/winemag-sample-5811-masked.csv",
        },
    ),
    "debian": (
        "data/debian/debtags-annotations-test-300-seeds.csv",
        {
            "plain": "data/debian/debian-packages-4000.csv",
            "masked": "data/debian/debian-packages-4000-masked.csv",
        },
    ),
}
ZERO_SHOT = "zero-shot MiniLM=sentence-transformers/all-MiniLM-L6-v2"
PRECISIONS = ("fp32", "bf16")
METRICS = ("mpr", "map", "hr@10")


def evaluate(catalog: str, annotations: str, model: str, precision: str, output: Path) -> tuple[dict, float]:
    """One ``metricbert evaluate`` call in a fresh process: its metrics and wall seconds."""
    command = [
        sys.executable,
        "-m",
        "metricbert_trainer.cli",
        "evaluate",
        "--catalog",
        catalog,
        "--annotations",
        annotations,
        "--model",
        model,
        "--precision",
        precision,
        # The length every figure of docs/evaluation.md's "Encoding precision" was measured at (the
        # commands' default until 2026-11-30, when it became the length the model's folder records).
        "--max-length",
        "128",
        "--output",
        str(output),
        "--overwrite",
        # Every call encodes the catalog, as the measured calls did: no cache kept between them.
        "--no-cache",
    ]
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seconds = time.perf_counter() - started
    return json.loads(output.read_text(encoding="utf-8"))["metrics"], seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models",
        nargs="*",
        default=[],
        metavar="DOMAIN=NAME=PATH",
        help="Trained models, each ranked on its domain's views (wines or debian) beside the zero-shot start.",
    )
    parser.add_argument("--domains", nargs="+", default=list(BENCHMARKS), choices=list(BENCHMARKS))
    arguments = parser.parse_args()
    trained: dict[str, list[str]] = {domain: [] for domain in BENCHMARKS}
    for spec in arguments.models:
        domain, model = spec.split("=", 1)
        trained[domain].append(model)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for domain in arguments.domains:
            annotations, views = BENCHMARKS[domain]
            for view, catalog in views.items():
                for model in [ZERO_SHOT, *trained[domain]]:
                    results = {}
                    for precision in PRECISIONS:
                        output = Path(folder) / f"{precision}.json"
                        results[precision] = evaluate(catalog, annotations, model, precision, output)
                    rows.append((f"{domain} {view}", model.split("=", 1)[0], results))
                    print(f"{domain} {view}, {model}: done", flush=True)
    print(
        f"\n{time.strftime('%Y-%m-%d')}, {cpu_name()}; metricbert evaluate with its default ranking "
        "(TF-IDF 0.3, shared neighbours 50, max length 128), test seeds; one call each in a fresh process\n"
    )
    header = " | ".join(f"{metric.upper()} fp32 -> bf16" for metric in METRICS)
    print(f"| benchmark | model | {header} | seconds fp32 / bf16 |")
    print("|---|---|" + "---:|" * (len(METRICS) + 1))
    for benchmark, model, results in rows:
        (fp32, fp32_seconds), (bf16, bf16_seconds) = results["fp32"], results["bf16"]
        cells = " | ".join(f"{fp32[metric]:.2f} -> {bf16[metric]:.2f}" for metric in METRICS)
        print(f"| {benchmark} | {model} | {cells} | {fp32_seconds:.1f} / {bf16_seconds:.1f} |")


if __name__ == "__main__":
    main()
