"""How strong is the teacher with shared neighbours, untrained? Issue #36, item 3, on dev seeds.

    python studies/shared_neighbours_teacher.py [--neighbours 20 30 50] [--weights 0.3 0.5 0.7]

Pseudo-labels teach a student only what the teacher knows beyond it (GPL), so before a training
screen of ``teacher_shared_neighbours`` this ranks the dev seeds of both development benchmarks
(studies/quality.yaml), in both views, with the recipe's teacher applied to the whole catalog
instead of a batch (``shared_neighbours.teacher_distance_rows``, the rows the lists are drawn from):
the frozen start's ``Metric_Inf`` fused with word-piece TF-IDF (the recipes' ``teacher_tfidf_weight``), each standardised per
query, at the recipe's ``max_length``; then with shared neighbours,
``(1 - g) * teacher + g * z(-overlap)``, the lists from ``shared_neighbours.teacher_neighbour_lists``
and the overlaps those of ``evaluation.shared_neighbours``. The start's vectors are the quality tables' zero-shot encodings (``--models-dir``, encoded there if
absent). The test seeds are never read.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from quality_tables import (
    QualitySpec,
    catalog_views,
    encoder_scorers,
    split_annotations,
)
from transformers import AutoTokenizer

from metricbert_trainer.base.modeling import resolve_model_name
from metricbert_trainer.evaluation.evaluator import evaluate_distance_rows
from metricbert_trainer.evaluation.ranking_rows import standardised_rows
from metricbert_trainer.evaluation.shared_neighbours import membership, overlap_rows
from metricbert_trainer.metricbert.config import MetricBertConfig
from metricbert_trainer.metricbert.shared_neighbours import teacher_distance_rows, teacher_neighbour_lists
from metricbert_trainer.metricbert.token_tfidf import fitted_catalog_vectors
from metricbert_trainer.publishing.markdown import markdown_table

SHOWN = ("mpr", "map", "hr@100", "ndcg@20")
# The teacher's own weight, which training uses (not the inference ranking's --tfidf-weight).
TEACHER_TFIDF_WEIGHT = MetricBertConfig.__dataclass_fields__["teacher_tfidf_weight"].default


def view_rows(name: str, catalog, scorer, dev, tokenizer, options: argparse.Namespace) -> list[list[str]]:
    """The rows of one benchmark's view (``name``): the teacher, then each k and weight added."""
    seeds = np.asarray(dev.seeds)
    columns = {field: [str(text) for text in catalog.texts(field)] for field in catalog.fields}
    encoder = [torch.from_numpy(np.asarray(vectors)) for vectors in scorer.item_vectors(catalog).values()]
    _, matrices = fitted_catalog_vectors(tokenizer, columns, scorer.max_length)
    teacher = teacher_distance_rows(
        encoder, matrices, torch.from_numpy(seeds), tfidf_weight=TEACHER_TFIDF_WEIGHT
    ).numpy()
    rows = []

    def report(label: str, distances: np.ndarray) -> None:
        metrics = evaluate_distance_rows(distances, dev)
        rows.append([*name.split("/"), label, *(f"{metrics[metric]:.2f}" for metric in SHOWN)])
        print(" | ".join(rows[-1]), flush=True)

    report(f"teacher (start + word-piece TF-IDF {TEACHER_TFIDF_WEIGHT:g})", teacher)
    for neighbours in options.neighbours:
        started = time.perf_counter()
        lists = teacher_neighbour_lists(
            encoder, matrices, tfidf_weight=TEACHER_TFIDF_WEIGHT, neighbours=neighbours
        )
        print(f"{name}: {neighbours} neighbours listed in {time.perf_counter() - started:.1f} s", flush=True)
        overlaps = standardised_rows(-overlap_rows(membership(lists.numpy()), seeds), seeds)
        for weight in options.weights:
            report(
                f"+ shared neighbours, k {neighbours}, weight {weight:g}",
                (1 - weight) * teacher + weight * overlaps,
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--spec", default="studies/quality.yaml", help="The benchmark file.")
    parser.add_argument(
        "--models-dir", default="outputs/levers", help="Where the zero-shot encodings are kept."
    )
    parser.add_argument("--neighbours", type=int, nargs="+", default=[20, 30, 50], help="The k to try.")
    parser.add_argument("--weights", type=float, nargs="+", default=[0.3, 0.5, 0.7], help="The g to try.")
    options = parser.parse_args()
    spec = QualitySpec.from_yaml(options.spec)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_name(spec.model))
    body = []
    for benchmark in spec.benchmarks:
        views = catalog_views(benchmark)
        dev = split_annotations(benchmark, views["plain"])["dev"]
        for _, _, view, scorer in encoder_scorers(
            spec, benchmark, Path(options.models_dir), views, models=()
        ):
            body += view_rows(f"{benchmark.name}/{view}", views[view], scorer, dev, tokenizer, options)
    headers = ["benchmark", "view", "teacher (untrained)", *(metric.upper() for metric in SHOWN)]
    print(f"\nDev seeds:\n\n{markdown_table(headers, body, 'lll' + 'r' * len(SHOWN))}")


if __name__ == "__main__":
    main()
