"""``metricbert evaluate``: ranking metrics of one model on annotated similar items."""

from __future__ import annotations

import argparse
from pathlib import Path

from metricbert_trainer.cli.options import (
    annotation_options,
    catalog_options,
    check_caches,
    command_cache,
    command_max_length,
    load_cli_catalog,
    model_options,
    model_paths,
    name_and_path,
    overwrite_options,
    pools_table,
    ranking_scorer,
    report_header,
    results_table,
    trim_cache_folder,
    write_json,
)
from metricbert_trainer.data.annotations import load_annotations
from metricbert_trainer.data.graded_pools import is_pool_file, load_graded_pools
from metricbert_trainer.data.output_files import check_new_file
from metricbert_trainer.evaluation.evaluator import evaluate_scorer, score_pools
from metricbert_trainer.evaluation.scorers import load_encoder


def add_parser(commands: argparse._SubParsersAction) -> None:
    evaluate = commands.add_parser(
        "evaluate",
        parents=[catalog_options(), annotation_options(), model_options(), overwrite_options()],
        help="Ranking metrics of one model on annotated similar items.",
    )
    evaluate.add_argument("--output", default=None, help="Write the metrics to this JSON file.")
    evaluate.set_defaults(command=run)


def per_pool(catalog, scores) -> list[dict]:
    """Each pool's query id, facet and metrics, for paired comparisons of two rankings."""
    return [
        {
            "query_id": catalog.ids[pool.query],
            "facet": pool.facet,
            "candidates": len(pool.candidates),
            **{metric: round(float(values[number]), 4) for metric, values in scores.values.items()},
        }
        for number, pool in enumerate(scores.pools)
    ]


def run(args: argparse.Namespace) -> int:
    if args.output:
        check_new_file(
            args.output,
            option="--output",
            reads=[args.catalog, args.annotations, *model_paths(args)],
            overwrite=args.overwrite,
        )
    check_caches(args)
    catalog = load_cli_catalog(args)
    pooled = is_pool_file(args.annotations)
    load = load_graded_pools if pooled else load_annotations
    annotations = load(args.annotations, catalog, on_unmatched=args.on_unmatched)
    name, path = name_and_path(args.model)
    model, tokenizer = load_encoder(path, device=args.device)
    cache = command_cache(args, model, tokenizer, catalog)
    scorer = ranking_scorer(args, model, tokenizer, name, cache_path=cache)
    if pooled:
        scores = score_pools(scorer, catalog, annotations)
        metrics = scores.summary()
        print(pools_table(scorer.name, scores))
    else:
        metrics = evaluate_scorer(scorer, catalog, annotations, ks=args.ks)
        print(results_table([(scorer.name, metrics)], args.ks))
    if args.output:
        report = report_header(args, catalog, annotations, command_max_length(args, model, tokenizer)) | {
            "model": path,
            "scorer": args.scorer,
            "precision": args.precision,
            "tfidf_weight": args.tfidf_weight,
            "tfidf_mode": args.tfidf_mode,
            "shared_neighbours": args.shared_neighbours,
            "shared_neighbour_weight": args.shared_neighbour_weight if args.shared_neighbours else None,
            "shared_neighbour_candidates": args.shared_neighbour_candidates
            if args.shared_neighbours
            else None,
            "metrics": metrics,
        }
        if pooled:
            report["per_pool"] = per_pool(catalog, scores)
        write_json(Path(args.output), report)
    trim_cache_folder(args, cache)
    return 0
