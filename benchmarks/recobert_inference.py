"""RecoBERT's inference on the wine sample: cross-pair throughput, full against re-ranked
inference (time and metrics), and the inference-weight ablation shaped like RecoBERT's Table 3.

    python benchmarks/recobert_inference.py --model outputs/wines-recobert --output-dir docs/recobert

1. Throughput: ``--throughput-pairs`` random cross pairs scored at each batch size and precision,
   median of ``--repeats`` runs, pairs per second and the ratio to fp32.
2. Re-ranking: every seed's cross pairs scored for the top ``max(--rerank-ks)`` candidates of
   Cos_D + Cos_T, timed; each smaller K is derived from that pass (``FourScores.reranked``), its
   time from the measured item-encoding time plus its pair count at the measured pair rate.
3. Full inference: every cross pair of ``--full-seeds`` seeds (a random sample; all 100 would take
   hours on a CPU), timed and extrapolated to every seed, with the metrics of full and of each
   re-ranked K on that same sample.
4. Weights: the metrics of each lambda setting of ``WEIGHT_ROWS`` over all seeds, from the
   re-ranked pass.

Writes ``inference.json`` and ``inference.md`` to ``--output-dir`` and prints the markdown.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from metricbert_trainer.data.annotations import Annotations, load_annotations
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.evaluation.evaluator import evaluate_distance_rows
from metricbert_trainer.evaluation.scorers import load_encoder
from metricbert_trainer.recobert import FourScores, PairEncoder, RecoBertScorer

REPO_ROOT = Path(__file__).resolve().parents[1]
FIRST_STAGE = (1.0, 1.0, 0.0, 0.0)
# (label, lambda_1..lambda_4 for Cos_D, Cos_T, C_TDM(t_m, d_s), C_TDM(t_s, d_m))
WEIGHT_ROWS = [
    ("Cos_D", (1, 0, 0, 0)),
    ("Cos_T", (0, 1, 0, 0)),
    ("Cos_D + Cos_T", (1, 1, 0, 0)),
    ("C_TDM(t_m, d_s)", (0, 0, 1, 0)),
    ("C_TDM(t_s, d_m)", (0, 0, 0, 1)),
    ("both C_TDM", (0, 0, 1, 1)),
    ("Cos_D + both C_TDM", (1, 0, 1, 1)),
    ("Cos_T + both C_TDM", (0, 1, 1, 1)),
    ("all four (RecoBERT)", (1, 1, 1, 1)),
]
METRICS = ("mpr", "mrr", "hr@10", "hr@100")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.manual_seed(0)
    model, tokenizer = load_encoder(args.model, device=args.device)
    catalog = load_catalog(args.catalog)
    annotations = load_annotations(args.annotations, catalog)
    titles, descriptions = catalog.texts("title"), catalog.texts("description")
    report = {
        "model": args.model,
        "catalog": args.catalog,
        "num_items": len(catalog),
        "num_seeds": len(annotations.seeds),
        "device": str(next(model.parameters()).device),
        "torch_threads": torch.get_num_threads(),
        "precision": args.precision,
        "command": " ".join(["python", *sys.argv]),
    }

    report["throughput"] = measure_throughput(model, tokenizer, titles, descriptions, args)
    pair_rate = next(
        row["pairs_per_second"]
        for row in report["throughput"]
        if row["precision"] == args.precision and row["batch_size"] == args.batch_size
    )

    largest = max(args.rerank_ks)
    scorer = RecoBertScorer(
        model,
        tokenizer,
        rerank_top_k=largest,
        batch_size=args.batch_size,
        max_length=args.max_length,
        precision=args.precision,
        show_progress=True,
    )
    encoding_started = time.perf_counter()
    encoder = PairEncoder(
        model, tokenizer, titles, descriptions, args.batch_size, args.max_length, args.precision
    )
    every_item = np.arange(len(catalog))
    encoder.vectors(every_item, every_item)
    encoding_seconds = time.perf_counter() - encoding_started
    started = time.perf_counter()
    reranked = scorer.scores(catalog, annotations.seeds)  # encodes the items again, then the cross pairs
    rerank_seconds = time.perf_counter() - started
    report["item_encoding_seconds"] = round(encoding_seconds, 1)
    report["rerank"] = []
    for k in sorted(args.rerank_ks):
        cross_pairs = 2 * len(annotations.seeds) * k
        seconds = rerank_seconds if k == largest else encoding_seconds + cross_pairs / pair_rate
        report["rerank"].append(
            {
                "k": k,
                "cross_pairs": cross_pairs,
                "seconds": round(seconds, 1),
                "timed": k == largest,
                "metrics": metrics_of(reranked.reranked(k, FIRST_STAGE), (1, 1, 1, 1), annotations),
            }
        )
    report["first_stage_only"] = metrics_of(reranked, FIRST_STAGE, annotations)

    sample = sorted(
        np.random.default_rng(args.seed).choice(annotations.seeds, args.full_seeds, replace=False).tolist()
    )
    subset = Annotations(
        similar={seed: annotations.similar[seed] for seed in sample}, source=annotations.source
    )
    full_scorer = dataclasses.replace(scorer, rerank_top_k=None)
    started = time.perf_counter()
    full = full_scorer.scores(catalog, subset.seeds)
    full_seconds = time.perf_counter() - started
    cross_pairs = 2 * len(sample) * (len(catalog) - 1)
    report["full"] = {
        "seeds": sample,
        "cross_pairs": cross_pairs,
        "seconds": round(full_seconds, 1),
        "pairs_per_second": round(cross_pairs / (full_seconds - encoding_seconds), 1),
        "extrapolated_seconds_all_seeds": round(
            encoding_seconds + (full_seconds - encoding_seconds) * len(annotations.seeds) / len(sample), 0
        ),
        "metrics": metrics_of(full, (1, 1, 1, 1), subset),
        "rerank_metrics_same_seeds": {
            str(k): metrics_of(full.reranked(k, FIRST_STAGE), (1, 1, 1, 1), subset)
            for k in sorted(args.rerank_ks)
        },
        "first_stage_only_same_seeds": metrics_of(full, FIRST_STAGE, subset),
    }
    report["weights"] = [
        {"scores": label, "weights": list(weights), "metrics": metrics_of(reranked, weights, annotations)}
        for label, weights in WEIGHT_ROWS
    ]

    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "inference.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    markdown = render(report, largest)
    (output_dir / "inference.md").write_text(markdown, encoding="utf-8")
    print(markdown)


def measure_throughput(model, tokenizer, titles, descriptions, args) -> list[dict]:
    """Median pairs per second of scoring the same random cross pairs, per precision and batch size."""
    rng = np.random.default_rng(args.seed)
    title_index = rng.integers(0, len(titles), args.throughput_pairs)
    description_index = rng.integers(0, len(titles), args.throughput_pairs)
    rows = []
    for precision in args.precisions:
        for batch_size in args.batch_sizes:
            encoder = PairEncoder(
                model, tokenizer, titles, descriptions, batch_size, args.max_length, precision
            )
            rates = []
            for _ in range(args.repeats):
                started = time.perf_counter()
                encoder.tdm_scores(title_index, description_index)
                rates.append(args.throughput_pairs / (time.perf_counter() - started))
            rows.append(
                {
                    "precision": precision,
                    "batch_size": batch_size,
                    "pairs_per_second": round(statistics.median(rates), 1),
                }
            )
    baseline = {row["batch_size"]: row["pairs_per_second"] for row in rows if row["precision"] == "fp32"}
    for row in rows:
        if row["batch_size"] in baseline:
            row["ratio_to_fp32"] = round(row["pairs_per_second"] / baseline[row["batch_size"]], 2)
    return rows


def metrics_of(scores: FourScores, weights, annotations: Annotations) -> dict[str, float]:
    metrics = evaluate_distance_rows(scores.distances(weights), annotations)
    return {name: round(value, 2) for name, value in metrics.items()}


def render(report: dict, largest: int) -> str:
    def cells(metrics):
        return " | ".join(f"{metrics[name]:.2f}" for name in METRICS)

    header = "| MPR | MRR | HR@10 | HR@100 |"
    rule = "---:|" * len(METRICS)
    lines = [
        f"# RecoBERT inference on {report['catalog']} ({report['num_items']} items, {report['num_seeds']} seeds)",
        "",
        f"Model `{report['model']}`, {report['device']}, {report['torch_threads']} threads, "
        f"precision {report['precision']}. Command: `{report['command']}`",
        "",
        "## Cross-pair throughput (median)",
        "",
        "| precision | batch | pairs/s | ratio to fp32 |",
        "|---|---:|---:|---:|",
    ]
    lines += [
        f"| {row['precision']} | {row['batch_size']} | {row['pairs_per_second']} | {row.get('ratio_to_fp32', '')} |"
        for row in report["throughput"]
    ]
    full = report["full"]
    lines += [
        "",
        "## Re-ranked inference, every seed",
        "",
        f"Item encoding (own pairs, Cos_D and Cos_T): {report['item_encoding_seconds']} s. "
        f"K = {largest} timed; smaller K derived from it (time: encoding + pairs at the measured rate).",
        "",
        f"| scoring | cross pairs | seconds | {header[2:]}",
        f"|---|---:|---:|{rule}",
        f"| Cos_D + Cos_T only | 0 | {report['item_encoding_seconds']} | {cells(report['first_stage_only'])} |",
    ]
    lines += [
        f"| re-rank top {row['k']} | {row['cross_pairs']} | {row['seconds']}{'' if row['timed'] else ' (est.)'} "
        f"| {cells(row['metrics'])} |"
        for row in report["rerank"]
    ]
    lines += [
        "",
        f"## Full against re-ranked inference, on {len(full['seeds'])} random seeds",
        "",
        f"Full inference: {full['cross_pairs']} cross pairs in {full['seconds']} s ({full['pairs_per_second']} pairs/s); "
        f"every seed would take about {full['extrapolated_seconds_all_seeds'] / 3600:.1f} h.",
        "",
        f"| scoring | {header[2:]}",
        f"|---|{rule}",
        f"| Cos_D + Cos_T only | {cells(full['first_stage_only_same_seeds'])} |",
    ]
    lines += [
        f"| re-rank top {k} | {cells(metrics)} |" for k, metrics in full["rerank_metrics_same_seeds"].items()
    ]
    lines += [f"| full | {cells(full['metrics'])} |"]
    lines += [
        "",
        f"## Inference weights (the shape of RecoBERT's Table 3), every seed, cross scores for the top {largest}",
        "",
        f"| scores | lambda | {header[2:]}",
        f"|---|---|{rule}",
    ]
    lines += [
        f"| {row['scores']} | {', '.join(str(w) for w in row['weights'])} | {cells(row['metrics'])} |"
        for row in report["weights"]
    ]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True, help="A trained RecoBERT folder.")
    parser.add_argument("--catalog", default="data/wines/winemag-sample-5811.csv")
    parser.add_argument("--annotations", default="data/wines/proxy-annotations-100-seeds.csv")
    parser.add_argument("--output-dir", default="docs/recobert")
    parser.add_argument("--device", default=None)
    parser.add_argument(
        "--precision", default="fp32", help="Precision of the inference passes (bf16, fp32, auto)."
    )
    parser.add_argument(
        "--precisions", nargs="+", default=["fp32", "bf16"], help="Precisions of the throughput test."
    )
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 64, 128])
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--throughput-pairs", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rerank-ks", type=int, nargs="+", default=[10, 50, 100, 200])
    parser.add_argument("--full-seeds", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.batch_size not in args.batch_sizes or args.precision not in args.precisions:
        parser.error(
            "--batch-size and --precision must be among the measured --batch-sizes and --precisions."
        )
    return args


if __name__ == "__main__":
    main()
