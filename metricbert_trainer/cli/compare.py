"""``metricbert compare``: baselines and models in one table, JSON file and bar chart."""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from metricbert_trainer.cli.argument_types import integer_at_least
from metricbert_trainer.cli.options import (
    add_shared_neighbour_weight,
    add_tfidf_mode,
    annotation_options,
    catalog_options,
    encoder_scorer,
    finite_number,
    load_cli_catalog,
    metric_label,
    model_paths,
    name_and_path,
    overwrite_options,
    report_header,
    results_table,
    unit_interval,
    write_json,
)
from metricbert_trainer.data.annotations import Annotations, load_annotations
from metricbert_trainer.data.catalog import Catalog
from metricbert_trainer.data.output_files import check_new_files, write_text_whole, write_whole
from metricbert_trainer.evaluation.encoding import PRECISIONS
from metricbert_trainer.evaluation.evaluator import evaluate_scorer
from metricbert_trainer.evaluation.hybrid import DEFAULT_TFIDF_WEIGHT, with_tfidf
from metricbert_trainer.evaluation.neighbours import CONCAT, METRIC_INF, catalog_views, mode_label
from metricbert_trainer.evaluation.scorers import (
    LdaScorer,
    Scorer,
    SentenceTransformerScorer,
    TfidfScorer,
    load_encoder,
    load_sentence_transformer,
)
from metricbert_trainer.evaluation.shared_neighbours import (
    DEFAULT_NEIGHBOURS,
    SharedNeighbourScorer,
)
from metricbert_trainer.evaluation.tfidf_cache import tfidf_cache_beside
from metricbert_trainer.recobert import RecoBertScorer

logger = logging.getLogger("metricbert_trainer.cli")

BASELINES = {
    "tfidf": lambda args: TfidfScorer(),
    "lda": lambda args: LdaScorer(num_topics=args.lda_topics),
}


def add_parser(commands: argparse._SubParsersAction) -> None:
    compare = commands.add_parser(
        "compare",
        parents=[catalog_options(), annotation_options(), overwrite_options()],
        help="Baselines and models in one table, JSON file and bar chart.",
    )
    add_scorer_arguments(compare)
    compare.add_argument(
        "--output-dir", required=True, help="Folder for results.md, results.json and results.png."
    )
    compare.set_defaults(command=run)


def add_scorer_arguments(parser: argparse.ArgumentParser) -> None:
    """The baselines and models to rank the catalog with, as ``compare`` and ``report`` take them."""
    parser.add_argument(
        "--baselines", nargs="*", choices=sorted(BASELINES), default=[], help="Baselines to run."
    )
    parser.add_argument(
        "--models",
        nargs="*",
        default=[],
        metavar="[NAME=]PATH",
        help="Hugging Face encoders (plain or sentence-transformers folders), mean-pooled.",
    )
    parser.add_argument(
        "--sbert",
        nargs="*",
        default=[],
        metavar="[NAME=]PATH",
        help="sentence-transformers models, used with their own pooling.",
    )
    parser.add_argument(
        "--recobert",
        nargs="*",
        default=[],
        metavar="[NAME=]PATH",
        help="RecoBERT models (recipes/train_recobert_wines.py), ranked by the four-score inference.",
    )
    parser.add_argument(
        "--recobert-weights",
        nargs=4,
        type=finite_number,
        default=[1.0, 1.0, 1.0, 1.0],
        metavar="LAMBDA",
        help="lambda_1..lambda_4 of Cos_D, Cos_T, C_TDM(t_candidate, d_seed), C_TDM(t_seed, d_candidate).",
    )
    parser.add_argument(
        "--rerank-top-k",
        type=integer_at_least(0),
        default=100,
        help="RecoBERT scores cross pairs for the top K candidates of Cos_D + Cos_T; 0 for every candidate "
        "(two forwards per seed and catalog item).",
    )
    parser.add_argument(
        "--recobert-max-length",
        type=integer_at_least(2),
        default=256,
        help="Tokens kept per RecoBERT title-description pair.",
    )
    parser.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="auto",
        help="RecoBERT inference precision: auto (bf16 on CUDA, fp32 on CPU), bf16 (also on CPU) or fp32.",
    )
    parser.add_argument(
        "--modes",
        nargs="+",
        default=[CONCAT, METRIC_INF],
        help=f"Scoring modes of the models (default: {CONCAT} {METRIC_INF}).",
    )
    parser.add_argument(
        "--lda-topics", type=integer_at_least(1), default=50, help="Topics of the LDA baseline."
    )
    parser.add_argument(
        "--tfidf-weight",
        type=unit_interval,
        default=None,
        help="Also rank each --models encoder fused with TF-IDF, TF-IDF weighing this much (the hybrid "
        f"evaluate and recommend rank with, at {DEFAULT_TFIDF_WEIGHT} by default).",
    )
    parser.add_argument(
        "--shared-neighbours",
        type=integer_at_least(1),
        default=None,
        metavar="K",
        help="Also rank each --models encoder's hybrid (the encoder alone without --tfidf-weight) re-ranked "
        "by K shared neighbours, as evaluate and recommend do "
        f"({DEFAULT_NEIGHBOURS or 'off'} by default; the catalog is encoded again for it).",
    )
    add_tfidf_mode(parser)
    add_shared_neighbour_weight(parser)


def scorers(args: argparse.Namespace, catalog: Catalog) -> Iterator[tuple[Scorer, dict]]:
    """Each scorer the arguments name (``add_scorer_arguments``), with what its result row records
    besides its metrics (the model's path). Models are loaded one at a time, as they are reached."""
    for mode in args.modes:
        catalog_views(catalog, mode)  # fail on a bad mode before hours of encoding
    if not (args.baselines or args.models or args.sbert or args.recobert):
        raise ValueError("Nothing to compare: give --baselines, --models, --sbert and/or --recobert.")
    for name in args.baselines:
        yield BASELINES[name](args), {}
    for spec in args.models:
        name, path = name_and_path(spec)
        model, tokenizer = load_encoder(path, device=args.device)
        # The fused and re-ranked rows rank with the model row's vectors and one fitted TF-IDF:
        # kept in files for the model's rows (the caches of evaluate's --cache), each mode is
        # encoded once instead of once per row.
        with tempfile.TemporaryDirectory(prefix="metricbert-compare-") as kept:
            for mode in args.modes:
                cache = str(Path(kept) / f"{mode}.npz")
                scorer = encoder_scorer(args, model, tokenizer, mode, name, cache_path=cache)
                read = {"model": path, "max_length": scorer.max_length}
                yield scorer, read
                if args.tfidf_weight:
                    scorer = with_tfidf(
                        scorer,
                        args.tfidf_weight,
                        tfidf_mode=args.tfidf_mode,
                        tfidf_cache=tfidf_cache_beside(cache),
                    )
                    yield scorer, read | {"tfidf_weight": args.tfidf_weight, "tfidf_mode": args.tfidf_mode}
                if args.shared_neighbours:
                    settings = {
                        "shared_neighbours": args.shared_neighbours,
                        "shared_neighbour_weight": args.shared_neighbour_weight,
                    }
                    yield (
                        SharedNeighbourScorer(scorer, args.shared_neighbours, args.shared_neighbour_weight),
                        read | {"tfidf_weight": args.tfidf_weight, **settings},
                    )
        del model
    for spec in args.sbert:
        name, path = name_and_path(spec)
        label = name if name.upper().startswith("SBERT") else f"SBERT {name}"  # rows say which pipeline
        model = load_sentence_transformer(path, device=args.device)  # once, for every mode
        for mode in args.modes:
            scorer = SentenceTransformerScorer(
                model,
                mode=mode,
                name=f"{label} ({mode_label(mode)})",
                batch_size=args.batch_size,
                show_progress=True,
            )
            yield scorer, {"model": path}
        del model
    for spec in args.recobert:
        name, path = name_and_path(spec)
        model, tokenizer = load_encoder(path, device=args.device)
        rerank = f"top {args.rerank_top_k} re-ranked" if args.rerank_top_k else "full"
        scorer = RecoBertScorer(
            model,
            tokenizer,
            weights=args.recobert_weights,
            rerank_top_k=args.rerank_top_k,
            name=f"{name} (4 scores, {rerank})",
            batch_size=args.batch_size,
            max_length=args.recobert_max_length,
            precision=args.precision,
            show_progress=True,
        )
        yield scorer, {"model": path}
        del model


RESULT_FILES = ("results.md", "results.json", "results.png")


def run(args: argparse.Namespace) -> int:
    output_dir = Path(args.output_dir)
    check_new_files(
        [output_dir / name for name in RESULT_FILES],
        option="--output-dir",
        reads=[args.catalog, args.annotations, *model_paths(args)],
        overwrite=args.overwrite,
    )
    catalog = load_cli_catalog(args)
    annotations = load_annotations(args.annotations, catalog, on_unmatched=args.on_unmatched)
    rows = [
        timed_evaluation(scorer, catalog, annotations, args.ks) | extra
        for scorer, extra in scorers(args, catalog)
    ]
    output_dir.mkdir(parents=True, exist_ok=True)
    table = results_table([(row["name"], row["metrics"]) for row in rows], args.ks)
    print(table)
    write_text_whole(output_dir / "results.md", table + "\n")
    header = report_header(args, catalog, annotations, args.max_length)
    write_json(output_dir / "results.json", header | {"results": rows})
    plot_comparison(
        rows,
        args.ks,
        output_dir / "results.png",
        title=comparison_title(args.catalog, annotations),
    )
    logger.info("Wrote results.md, results.json and results.png to %s.", output_dir)
    return 0


def comparison_title(catalog_path: str, annotations: Annotations) -> str:
    return f"{Path(catalog_path).name}: {annotations.num_pairs} pairs, {len(annotations.seeds)} seeds"


def plot_comparison(rows: Sequence[dict], ks: Sequence[int], path: Path, *, title: str) -> None:
    """Writes ``comparison_figure`` to ``path`` (PNG)."""
    figure = comparison_figure(rows, ks, title=title)
    write_whole(path, lambda temporary: figure.savefig(temporary, dpi=120, format="png"))


def comparison_figure(rows: Sequence[dict], ks: Sequence[int], *, title: str):
    """A matplotlib ``Figure``: one panel per metric, a filtered (solid) and a raw (hatched) bar per
    scorer, the scorers down the side in the table's order. Why horizontal, in a figure as tall as
    the rows need and laid out by matplotlib's constrained layout: scorer names are long
    ("MetricBERT (Metric_Inf) + TF-IDF 0.3 + shared neighbours 50"), and under the bars, turned 45
    degrees, sixteen of them overlapped and ran off the image."""
    import numpy as np
    from matplotlib.figure import Figure

    names = ["mpr", "mrr", *(f"hr@{k}" for k in ks)]
    positions = np.arange(len(rows))
    figure = Figure(figsize=(4 + 2.6 * len(names), 1.4 + 0.32 * len(rows)), layout="constrained")
    axes = figure.subplots(1, len(names), sharey=True, squeeze=False)[0]
    for axis, name in zip(axes, names, strict=True):
        axis.barh(positions - 0.2, [row["metrics"][name] for row in rows], height=0.4, label="filtered")
        axis.barh(
            positions + 0.2,
            [row["metrics"][f"raw_{name}"] for row in rows],
            height=0.4,
            hatch="//",
            fill=False,
            label="raw",
        )
        axis.set_title(f"{metric_label(name)} (%)", fontsize=10)
        axis.tick_params(axis="x", labelsize=8)
    axes[0].set_yticks(positions, [row["name"] for row in rows], fontsize=8)
    axes[0].invert_yaxis()  # the first scorer at the top, as in the table
    figure.suptitle(title)
    figure.legend(*axes[0].get_legend_handles_labels(), loc="outside upper right", ncols=2, fontsize=8)
    return figure


def timed_evaluation(scorer: Scorer, catalog: Catalog, annotations: Annotations, ks: Sequence[int]) -> dict:
    logger.info("Evaluating %s.", scorer.name)
    start = time.perf_counter()
    metrics = evaluate_scorer(scorer, catalog, annotations, ks=ks)
    return {"name": scorer.name, "metrics": metrics, "seconds": round(time.perf_counter() - start, 2)}
