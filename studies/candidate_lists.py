"""Shared-neighbour lists searched among candidates against exact lists, on the dev seeds.

    python studies/candidate_lists.py [--candidates 100 200 400] [--backend exact|faiss]
    python studies/candidate_lists.py --teacher [--candidates 100 200 400]

``evaluate`` and ``recommend`` re-rank the hybrid by shared neighbours, whose exact lists compare
every item with every other (hours at a million items). ``evaluation.candidate_lists`` searches
each item's list among its nearest items under the encoder instead. This measures what that
costs the ranking: for every encoder of the quality tables (the zero-shot start and the default
recipe's trained models, ``outputs/quality``: run ``studies/quality_tables.py`` first), both
development benchmarks and both views, the share of each exact list the candidate list holds
(recall), the time of each listing, and the dev metrics of the default ranking with each kind of
list. The candidates are searched exactly (``neighbours.top_k``) or, as ``metricbert`` searches them,
with a FAISS HNSW32 index (``--backend faiss``); the test seeds are never read.

``--teacher``: the training teacher's lists instead (``teacher_shared_neighbours``, searched among
candidates with ``teacher_shared_neighbour_candidates``: the start's nearest items by an HNSW32
index, re-scored by the teacher's fusion of the start and word-piece TF-IDF), on each development
catalog's items with the zero-shot start's vectors: the recall of the exact lists and the time of
each listing. No annotation is read.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from million_items import recipe_shared_neighbours
from quality_tables import (
    QualitySpec,
    catalog_views,
    encoder_scorers,
    split_annotations,
)

from metricbert_trainer.evaluation.candidate_lists import candidate_neighbour_lists, list_recall
from metricbert_trainer.evaluation.evaluator import evaluate_distance_rows
from metricbert_trainer.evaluation.hybrid import with_tfidf
from metricbert_trainer.evaluation.shared_neighbours import (
    DEFAULT_NEIGHBOURS,
    DEFAULT_WEIGHT,
    membership,
    neighbour_lists,
    overlap_rows,
    reranked_rows,
)
from metricbert_trainer.publishing.markdown import markdown_table

SHOWN = ("mpr", "hr@100", "map", "ndcg@20")


def teacher_listings(spec: QualitySpec, candidate_counts: list[int], models_dir: Path) -> None:
    """Per development catalog: the teacher's exact lists against lists searched among each of
    ``candidate_counts``, as a training run of the catalog recipe lists them before its first step."""
    import torch

    from metricbert_trainer.metricbert.config import MetricBertConfig
    from metricbert_trainer.metricbert.shared_neighbours import (
        teacher_candidate_lists,
        teacher_neighbour_lists,
    )
    from metricbert_trainer.metricbert.token_tfidf import fitted_catalog_vectors

    options = {
        "tfidf_weight": MetricBertConfig.teacher_tfidf_weight,
        "neighbours": recipe_shared_neighbours(),
    }
    rows = []
    for benchmark in spec.benchmarks:
        catalog = catalog_views(benchmark)["plain"]
        _, _, _, start = next(encoder_scorers(spec, benchmark, models_dir, {"plain": catalog}, models=()))
        vectors = start.item_vectors(catalog)
        encoder = [torch.from_numpy(vectors[field]) for field in catalog.fields]
        texts = {field: catalog.texts(field) for field in catalog.fields}
        _, matrices = fitted_catalog_vectors(start.tokenizer, texts, start.max_length)
        started = time.perf_counter()
        exact = teacher_neighbour_lists(encoder, matrices, **options).numpy()
        rows.append(
            [
                benchmark.name,
                f"{len(catalog):,}",
                "every item (exact)",
                "1.0000",
                f"{time.perf_counter() - started:.1f}",
            ]
        )
        for candidates in candidate_counts:
            started = time.perf_counter()
            lists = teacher_candidate_lists(encoder, matrices, candidates=candidates, **options).numpy()
            seconds = time.perf_counter() - started
            rows.append(
                [
                    benchmark.name,
                    f"{len(catalog):,}",
                    str(candidates),
                    f"{list_recall(lists, exact):.4f}",
                    f"{seconds:.1f}",
                ]
            )
        print(rows[-1], flush=True)
    columns = ["catalog", "items", "searched among", "recall of the exact lists", "listing (s)"]
    print(
        f"\nThe teacher's {options['neighbours']} shared neighbours per item, the zero-shot start's vectors; "
        f"produced by `python studies/candidate_lists.py --teacher`:\n\n{markdown_table(columns, rows, 'llrrr')}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--candidates", type=int, nargs="+", default=[100, 200, 400])
    parser.add_argument("--backend", choices=["exact", "faiss"], default="exact")
    parser.add_argument("--spec", default="studies/quality.yaml")
    parser.add_argument("--models-dir", default="outputs/quality")
    parser.add_argument("--teacher", action="store_true", help="The training teacher's lists (see above).")
    options = parser.parse_args()
    spec = QualitySpec.from_yaml(options.spec)
    if options.teacher:
        teacher_listings(spec, options.candidates, Path(options.models_dir))
        return
    found: dict[int, dict[str, list[float]]] = {}
    for benchmark in spec.benchmarks:
        views = catalog_views(benchmark)
        dev = split_annotations(benchmark, views["plain"])["dev"]
        for name, seed, view, scorer in encoder_scorers(spec, benchmark, Path(options.models_dir), views):
            catalog = views[view]
            hybrid = with_tfidf(scorer)
            rank = hybrid.row_ranker(catalog)
            base = rank(dev.seeds)
            started = time.perf_counter()
            exact = neighbour_lists(rank, len(catalog), DEFAULT_NEIGHBOURS)
            listings = {0: (exact, time.perf_counter() - started)}
            for candidates in options.candidates:
                started = time.perf_counter()
                lists = candidate_neighbour_lists(
                    hybrid, catalog, DEFAULT_NEIGHBOURS, candidates, backend=options.backend
                )
                listings[candidates] = (lists, time.perf_counter() - started)
            ranked = {
                candidates: evaluate_distance_rows(
                    reranked_rows(
                        base, overlap_rows(membership(lists), dev.seeds), DEFAULT_WEIGHT, dev.seeds
                    ),
                    dev,
                )
                for candidates, (lists, _) in listings.items()
            }
            reference = ranked[0]  # the exact lists
            for candidates, (lists, seconds) in listings.items():
                metrics = ranked[candidates]
                entry = found.setdefault(candidates, {"recall": [], "seconds": []})
                entry["recall"].append(list_recall(lists, exact))
                entry["seconds"].append(seconds)
                for metric in SHOWN:
                    entry.setdefault(metric, []).append(float(metrics[metric] - reference[metric]))
            print(f"{benchmark.name} {view} {name} {seed}: {len(catalog)} items", flush=True)
    rows = []
    for candidates, entry in found.items():
        label = "every item (exact)" if candidates == 0 else str(candidates)
        cells = [
            f"{statistics.fmean(entry['recall']):.4f} ({min(entry['recall']):.4f})",
            f"{statistics.median(entry['seconds']):.1f}",
            *(f"{statistics.fmean(entry[metric]):+.2f} ({min(entry[metric]):+.2f})" for metric in SHOWN),
        ]
        rows.append([label, *cells])
    columns = ["searched among", "recall of the exact lists: mean (min)", "listing (s, median)"]
    columns += [f"{metric.upper()} against exact lists: mean (min)" for metric in SHOWN]
    cases = len(found[0]["recall"])
    print(
        f"\nDev seeds, {cases} (benchmark, view, encoder) cases, {DEFAULT_NEIGHBOURS} neighbours, candidates "
        f"searched by {options.backend}; produced by `python studies/candidate_lists.py --backend {options.backend}`:\n\n{markdown_table(columns, rows, 'l' + 'r' * (len(columns) - 1))}"
    )


if __name__ == "__main__":
    main()
