"""``metricbert report``: one self-contained HTML page of metrics, plots and recommendations.

Takes the same scorers as ``compare`` (baselines, models, sentence-transformers and RecoBERT
models) and ranks the catalog from each annotated seed once per scorer: the metrics come from
those rankings through the library's metrics, and the page shows each seed's top items from
them, so what it shows is what the numbers measure (``publishing.report_page``).
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path

from metricbert_trainer.cli.argument_types import integer_at_least
from metricbert_trainer.cli.compare import add_scorer_arguments, comparison_title, plot_comparison, scorers
from metricbert_trainer.cli.options import (
    annotation_options,
    catalog_options,
    load_cli_catalog,
    model_paths,
    overwrite_options,
    results_cells,
)
from metricbert_trainer.data.annotations import load_annotations
from metricbert_trainer.data.output_files import check_new_file, write_text_whole
from metricbert_trainer.evaluation.evaluator import evaluate_distance_rows, seed_rankings
from metricbert_trainer.publishing.report_page import ScorerView, render_report

logger = logging.getLogger("metricbert_trainer.cli")


def add_parser(commands: argparse._SubParsersAction) -> None:
    report = commands.add_parser(
        "report",
        parents=[catalog_options(), annotation_options(), overwrite_options()],
        help="One self-contained HTML page: metrics, plots and each seed's recommendations per model.",
    )
    add_scorer_arguments(report)
    report.add_argument(
        "--top-k", type=integer_at_least(1), default=10, help="Recommendations shown per seed and model."
    )
    report.add_argument("--output", required=True, help="The HTML file to write.")
    report.set_defaults(command=run)


def run(args: argparse.Namespace) -> int:
    output = check_new_file(
        args.output,
        option="--output",
        reads=[args.catalog, args.annotations, *model_paths(args)],
        overwrite=args.overwrite,
    )
    catalog = load_cli_catalog(args)
    annotations = load_annotations(args.annotations, catalog, on_unmatched=args.on_unmatched)
    rows, views = [], []
    for scorer, _ in scorers(args, catalog):
        logger.info("Ranking with %s.", scorer.name)
        distances = scorer.distance_rows(catalog, annotations.seeds)
        rows.append(
            {"name": scorer.name, "metrics": evaluate_distance_rows(distances, annotations, ks=args.ks)}
        )
        views.append(ScorerView(scorer.name, seed_rankings(distances, annotations, top_k=args.top_k)))
    title = comparison_title(args.catalog, annotations)
    with tempfile.TemporaryDirectory() as folder:
        chart = Path(folder) / "results.png"
        plot_comparison(rows, args.ks, chart, title=title)
        plots = [("Filtered (solid) and raw (hatched) metrics per scorer", chart.read_bytes())]
    page = render_report(
        title=title,
        catalog=catalog,
        similar=annotations.similar,
        table=results_cells([(row["name"], row["metrics"]) for row in rows], args.ks),
        scorers=views,
        plots=plots,
    )
    output.parent.mkdir(parents=True, exist_ok=True)
    write_text_whole(output, page)
    logger.info("Wrote %s (%d seeds, %d scorers).", output, len(annotations.seeds), len(views))
    return 0
