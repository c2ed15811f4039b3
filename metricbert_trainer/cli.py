"""The ``metricbert`` command: evaluate a model, list an item's neighbours, compare against baselines.

    metricbert evaluate --model PATH --catalog CSV --annotations FILE [--scorer metric_inf] [--output JSON]
    metricbert recommend --model PATH --catalog CSV --item ID [--top-k 10]
    metricbert compare --catalog CSV --annotations FILE --baselines tfidf lda --models PATH [...]
        [--sbert PATH ...] [--recobert PATH ...] --output-dir DIR
    metricbert consolidate CHECKPOINT OUTPUT_DIR --allow-pickle   (a DeepSpeed ZeRO checkpoint -> a plain model)
    metricbert plot CHECKPOINT --catalog CSV --column variety [--before MODEL]

Model paths may be plain Hugging Face folders or sentence-transformers folders; ``NAME=PATH``
names a model's rows in the tables. Everything is computed by the library's scorers, ranking and
metrics, so these numbers are the ones the trainer logs.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import transformers
from huggingface_hub import ModelCard

from metricbert_trainer.annotations import ON_UNMATCHED, AnnotationError, Annotations, load_annotations
from metricbert_trainer.baselines import (
    EncoderScorer,
    LdaScorer,
    Scorer,
    SentenceTransformerScorer,
    TfidfScorer,
    load_encoder,
    load_sentence_transformer,
)
from metricbert_trainer.catalog import Catalog, CatalogError, catalog_column, load_catalog
from metricbert_trainer.consolidate import consolidate_zero_checkpoint
from metricbert_trainer.encoding import PRECISIONS
from metricbert_trainer.evaluation import evaluate_scorer
from metricbert_trainer.modeling import resolve_model_name
from metricbert_trainer.plots import plot_catalog_before_after, plot_loss_terms
from metricbert_trainer.ranking import CONCAT, METRIC_INF, catalog_views, mode_label, top_k
from metricbert_trainer.recobert import RecoBertScorer

logger = logging.getLogger("metricbert_trainer.cli")

BASELINES = {
    "tfidf": lambda args: TfidfScorer(),
    "lda": lambda args: LdaScorer(num_topics=args.lda_topics),
}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    # Loading an MLM checkpoint as a bare encoder reports its unused head at length; it is expected.
    transformers.logging.set_verbosity_error()
    try:
        return args.command(args)
    except (CatalogError, AnnotationError, FileNotFoundError, PermissionError, ValueError) as error:
        print(f"metricbert {args.command_name}: error: {error}", file=sys.stderr)
        return 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="metricbert", description="Evaluate and use MetricBERT recommenders."
    )
    commands = parser.add_subparsers(dest="command_name", required=True)

    catalog_options = argparse.ArgumentParser(add_help=False)
    catalog_options.add_argument(
        "--catalog", required=True, help="Catalog file (CSV, TSV, JSONL or Parquet)."
    )
    catalog_options.add_argument("--id-column", default="id", help="Column of unique item ids (default: id).")
    catalog_options.add_argument(
        "--text-columns",
        nargs="+",
        default=["title", "description"],
        help="Text fields, title first (default: title description).",
    )
    catalog_options.add_argument("--batch-size", type=int, default=64, help="Encoding batch size.")
    catalog_options.add_argument("--max-length", type=int, default=128, help="Tokens kept per text.")
    catalog_options.add_argument(
        "--device", default=None, help="Torch device (default: cuda when available)."
    )

    annotation_options = argparse.ArgumentParser(add_help=False)
    annotation_options.add_argument(
        "--annotations",
        required=True,
        help="Annotated similar items: sommelier/proxy CSV or video-games JSON.",
    )
    annotation_options.add_argument(
        "--on-unmatched",
        choices=ON_UNMATCHED,
        default="error",
        help="Annotations naming no catalog item: fail (default) or drop with a warning.",
    )
    annotation_options.add_argument("--ks", type=int, nargs="+", default=[10, 100], help="Cut-offs of HR@k.")

    model_options = argparse.ArgumentParser(add_help=False)
    model_options.add_argument(
        "--model",
        required=True,
        metavar="[NAME=]PATH",
        help="Hugging Face or sentence-transformers model folder.",
    )
    model_options.add_argument(
        "--scorer",
        default=METRIC_INF,
        help=f"{METRIC_INF} (sum of per-field angular distances), {CONCAT} "
        "(fields joined, the paper's Mean) or a field name.",
    )
    model_options.add_argument(
        "--cache", default=None, help="An .npz to keep the catalog embeddings in and reuse."
    )

    evaluate = commands.add_parser(
        "evaluate",
        parents=[catalog_options, annotation_options, model_options],
        help="Ranking metrics of one model on annotated similar items.",
    )
    evaluate.add_argument("--output", default=None, help="Write the metrics to this JSON file.")
    evaluate.set_defaults(command=run_evaluate)

    recommend = commands.add_parser(
        "recommend", parents=[catalog_options, model_options], help="The items most similar to one item."
    )
    recommend.add_argument("--item", required=True, help="Id of the item to find neighbours for.")
    recommend.add_argument("--top-k", type=int, default=10, help="How many neighbours to list.")
    recommend.set_defaults(command=run_recommend)

    compare = commands.add_parser(
        "compare",
        parents=[catalog_options, annotation_options],
        help="Baselines and models in one table, JSON file and bar chart.",
    )
    compare.add_argument(
        "--baselines", nargs="*", choices=sorted(BASELINES), default=[], help="Baselines to run."
    )
    compare.add_argument(
        "--models",
        nargs="*",
        default=[],
        metavar="[NAME=]PATH",
        help="Hugging Face encoders (plain or sentence-transformers folders), mean-pooled.",
    )
    compare.add_argument(
        "--sbert",
        nargs="*",
        default=[],
        metavar="[NAME=]PATH",
        help="sentence-transformers models, used with their own pooling.",
    )
    compare.add_argument(
        "--recobert",
        nargs="*",
        default=[],
        metavar="[NAME=]PATH",
        help="RecoBERT models (recipes/train_recobert_wines.py), ranked by the four-score inference.",
    )
    compare.add_argument(
        "--recobert-weights",
        nargs=4,
        type=float,
        default=[1.0, 1.0, 1.0, 1.0],
        metavar="LAMBDA",
        help="lambda_1..lambda_4 of Cos_D, Cos_T, C_TDM(t_candidate, d_seed), C_TDM(t_seed, d_candidate).",
    )
    compare.add_argument(
        "--rerank-top-k",
        type=int,
        default=100,
        help="RecoBERT scores cross pairs for the top K candidates of Cos_D + Cos_T; 0 for every candidate "
        "(two forwards per seed and catalog item).",
    )
    compare.add_argument(
        "--recobert-max-length",
        type=int,
        default=256,
        help="Tokens kept per RecoBERT title-description pair.",
    )
    compare.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="auto",
        help="RecoBERT inference precision: auto (bf16 on CUDA, fp32 on CPU), bf16 (also on CPU) or fp32.",
    )
    compare.add_argument(
        "--modes",
        nargs="+",
        default=[CONCAT, METRIC_INF],
        help=f"Scoring modes of the models (default: {CONCAT} {METRIC_INF}).",
    )
    compare.add_argument("--lda-topics", type=int, default=50, help="Topics of the LDA baseline.")
    compare.add_argument(
        "--output-dir", required=True, help="Folder for results.md, results.json and results.png."
    )
    compare.set_defaults(command=run_compare)

    consolidate = commands.add_parser(
        "consolidate",
        help="Merge a DeepSpeed ZeRO checkpoint's partitions into an ordinary fp32 model folder.",
    )
    consolidate.add_argument(
        "checkpoint", help="A Trainer checkpoint folder (checkpoint-N) saved under DeepSpeed."
    )
    consolidate.add_argument("output_dir", help="Folder for the consolidated model, config and tokenizer.")
    consolidate.add_argument(
        "--tag", default=None, help="The global_step folder to read (default: the one 'latest' names)."
    )
    consolidate.add_argument(
        "--allow-pickle",
        action="store_true",
        help="Required: DeepSpeed stores the partitions as pickles, which can run code; only for trusted checkpoints.",
    )
    consolidate.set_defaults(command=run_consolidate)

    plot = commands.add_parser(
        "plot",
        parents=[catalog_options],
        help="Plots of a checkpoint: its loss terms, and the catalog's embeddings before and after training.",
    )
    plot.add_argument("checkpoint", help="A saved model or checkpoint-N folder.")
    plot.add_argument(
        "--column",
        required=True,
        help="Catalog column that colours the items (e.g. variety); only the plot reads it.",
    )
    plot.add_argument(
        "--before",
        default=None,
        help="The starting model (default: the base_model named in the checkpoint's model card).",
    )
    plot.add_argument("--max-items", type=int, default=2000, help="Items drawn (a fixed random sample).")
    plot.add_argument(
        "--output-dir", default=None, help="Where the PNGs go (default: the checkpoint folder)."
    )
    plot.set_defaults(command=run_plot)
    return parser


def _encoder_scorer(
    args: argparse.Namespace, model, tokenizer, mode: str, name: str, cache_path: str | None = None
) -> EncoderScorer:
    """The library's scorer of an encoder under ``mode``, with the command's batch size and
    truncation, named as its result rows are."""
    return EncoderScorer(
        model,
        tokenizer,
        mode=mode,
        name=f"{name} ({mode_label(mode)})",
        batch_size=args.batch_size,
        max_length=args.max_length,
        cache_path=cache_path,
        show_progress=True,
    )


def run_evaluate(args: argparse.Namespace) -> int:
    catalog = _load_catalog(args)
    annotations = load_annotations(args.annotations, catalog, on_unmatched=args.on_unmatched)
    name, path = _name_and_path(args.model)
    model, tokenizer = load_encoder(path, device=args.device)
    scorer = _encoder_scorer(args, model, tokenizer, args.scorer, name, cache_path=args.cache)
    metrics = evaluate_scorer(scorer, catalog, annotations, ks=args.ks)
    print(markdown_table([(scorer.name, metrics)], args.ks))
    if args.output:
        report = _report_header(args, catalog, annotations) | {
            "model": path,
            "scorer": args.scorer,
            "metrics": metrics,
        }
        _write_json(Path(args.output), report)
    return 0


def run_recommend(args: argparse.Namespace) -> int:
    catalog = _load_catalog(args)
    try:
        item = catalog.ids.index(args.item)
    except ValueError:
        raise ValueError(
            f"No item with id {args.item!r} in {catalog.source} (ids come from the "
            f"{args.id_column!r} column; items with an empty text field are skipped)."
        ) from None
    name, path = _name_and_path(args.model)
    model, tokenizer = load_encoder(path, device=args.device)
    scorer = _encoder_scorer(args, model, tokenizer, args.scorer, name, cache_path=args.cache)
    neighbours = top_k(scorer.item_vectors(catalog), scorer.distance, args.top_k, queries=[item])
    titles, ids = catalog.display_titles, catalog.ids
    print(f"Most similar to {titles[item]} (id {ids[item]}), by {mode_label(args.scorer)}:\n")
    print("| Rank | Id | Title | Distance |\n|---:|---|---|---:|")
    for rank, (index, distance) in enumerate(
        zip(neighbours.indices[0], neighbours.distances[0], strict=True), 1
    ):
        print(f"| {rank} | {ids[index]} | {_cell(titles[index])} | {distance:.4f} |")
    return 0


def run_consolidate(args: argparse.Namespace) -> int:
    output_dir = consolidate_zero_checkpoint(
        args.checkpoint, args.output_dir, tag=args.tag, allow_pickle=args.allow_pickle
    )
    print(f"Wrote {output_dir}: load it with AutoModel.from_pretrained({str(output_dir)!r}).")
    return 0


def run_plot(args: argparse.Namespace) -> int:
    checkpoint = Path(args.checkpoint)
    output_dir = Path(args.output_dir) if args.output_dir else checkpoint
    state_file = checkpoint / "trainer_state.json"
    if state_file.is_file():
        history = json.loads(state_file.read_text(encoding="utf-8"))["log_history"]
        written = plot_loss_terms(history, output_dir / "loss_terms.png")
        print(f"Wrote {written}" if written else f"{state_file} holds no logged loss yet.")
    else:
        print(f"{checkpoint} has no trainer_state.json (a checkpoint-N folder has): no loss plot.")
    before = args.before or _card_base_model(checkpoint)
    if before is None:
        raise ValueError(
            f"{checkpoint}'s model card names no base model: name the starting model with --before."
        )
    catalog = _load_catalog(args)
    labels = catalog_column(args.catalog, catalog, args.column, id_column=args.id_column)
    pairs = [load_encoder(path, device=args.device) for path in (resolve_model_name(before), str(checkpoint))]
    path = plot_catalog_before_after(
        pairs[0],
        pairs[1],
        catalog,
        labels,
        output_dir / "embeddings_pca.png",
        column=args.column,
        max_length=args.max_length,
        max_items=args.max_items,
    )
    print(f"Wrote {path}")
    return 0


def _card_base_model(folder: Path) -> str | None:
    card = folder / "README.md"
    return ModelCard.load(card).data.base_model if card.is_file() else None


def run_compare(args: argparse.Namespace) -> int:
    catalog = _load_catalog(args)
    for mode in args.modes:
        catalog_views(catalog, mode)  # fail on a bad mode before hours of encoding
    annotations = load_annotations(args.annotations, catalog, on_unmatched=args.on_unmatched)
    if not (args.baselines or args.models or args.sbert or args.recobert):
        raise ValueError("Nothing to compare: give --baselines, --models, --sbert and/or --recobert.")
    rows = []
    for name in args.baselines:
        rows.append(_timed_evaluation(BASELINES[name](args), catalog, annotations, args.ks))
    for spec in args.models:
        name, path = _name_and_path(spec)
        model, tokenizer = load_encoder(path, device=args.device)
        for mode in args.modes:
            scorer = _encoder_scorer(args, model, tokenizer, mode, name)
            rows.append(_timed_evaluation(scorer, catalog, annotations, args.ks) | {"model": path})
        del model
    for spec in args.sbert:
        name, path = _name_and_path(spec)
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
            rows.append(_timed_evaluation(scorer, catalog, annotations, args.ks) | {"model": path})
        del model
    for spec in args.recobert:
        name, path = _name_and_path(spec)
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
        rows.append(_timed_evaluation(scorer, catalog, annotations, args.ks) | {"model": path})
        del model

    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    table = markdown_table([(row["name"], row["metrics"]) for row in rows], args.ks)
    print(table)
    (output_dir / "results.md").write_text(table + "\n", encoding="utf-8")
    _write_json(output_dir / "results.json", _report_header(args, catalog, annotations) | {"results": rows})
    plot_comparison(
        rows,
        args.ks,
        output_dir / "results.png",
        title=f"{Path(args.catalog).name}: {annotations.num_pairs} pairs, {len(annotations.seeds)} seeds",
    )
    logger.info("Wrote results.md, results.json and results.png to %s.", output_dir)
    return 0


HEAD_METRICS = ("map", "ndcg@20")


def markdown_table(rows: Sequence[tuple[str, dict[str, float]]], ks: Sequence[int]) -> str:
    """Filtered then raw metrics, then the per-seed MAP and NDCG@20, one row per scorer, to one decimal."""
    names = ["mpr", "mrr", *(f"hr@{k}" for k in ks)]
    headers = [_metric_label(name) for name in names] + [f"raw {_metric_label(name)}" for name in names]
    headers += [_metric_label(name) for name in HEAD_METRICS]
    lines = ["| Scorer | " + " | ".join(headers) + " |", "|---|" + "---:|" * len(headers)]
    for label, metrics in rows:
        values = [metrics[name] for name in names] + [metrics[f"raw_{name}"] for name in names]
        values += [metrics[name] for name in HEAD_METRICS]
        lines.append(f"| {_cell(label)} | " + " | ".join(f"{value:.1f}" for value in values) + " |")
    return "\n".join(lines)


def plot_comparison(rows: Sequence[dict], ks: Sequence[int], path: Path, *, title: str) -> None:
    """One panel per metric, a filtered (solid) and a raw (hatched) bar per scorer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    names = ["mpr", "mrr", *(f"hr@{k}" for k in ks)]
    labels = [row["name"] for row in rows]
    positions = np.arange(len(rows))
    figure, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names), 4.5), squeeze=False)
    for axis, name in zip(axes[0], names, strict=True):
        axis.bar(positions - 0.2, [row["metrics"][name] for row in rows], width=0.4, label="filtered")
        axis.bar(
            positions + 0.2,
            [row["metrics"][f"raw_{name}"] for row in rows],
            width=0.4,
            hatch="//",
            fill=False,
            label="raw",
        )
        axis.set_title(f"{_metric_label(name)} (%)")
        axis.set_xticks(positions, labels, rotation=45, ha="right", fontsize=8)
    figure.suptitle(title)
    figure.legend(*axes[0][0].get_legend_handles_labels(), loc="upper right", ncols=2, fontsize=8)
    figure.tight_layout(rect=(0, 0, 1, 0.94))
    figure.savefig(path, dpi=120)
    plt.close(figure)


def _timed_evaluation(scorer: Scorer, catalog: Catalog, annotations: Annotations, ks: Sequence[int]) -> dict:
    logger.info("Evaluating %s.", scorer.name)
    start = time.perf_counter()
    metrics = evaluate_scorer(scorer, catalog, annotations, ks=ks)
    return {"name": scorer.name, "metrics": metrics, "seconds": round(time.perf_counter() - start, 2)}


def _load_catalog(args: argparse.Namespace) -> Catalog:
    id_column = args.id_column or None  # --id-column "" numbers the rows
    return load_catalog(args.catalog, id_column=id_column, text_columns=args.text_columns)


def _name_and_path(spec: str) -> tuple[str, str]:
    """``NAME=PATH`` or ``PATH`` (named after its folder)."""
    name, separator, path = spec.partition("=")
    if separator and name and "/" not in name:
        return name, path
    return Path(spec).name, spec


def _report_header(args: argparse.Namespace, catalog: Catalog, annotations: Annotations) -> dict:
    return {
        "catalog": args.catalog,
        "text_columns": list(catalog.fields),
        "num_items": len(catalog),
        "annotations": args.annotations,
        "num_seeds": len(annotations.seeds),
        "num_pairs": annotations.num_pairs,
        "ks": list(args.ks),
        "max_length": args.max_length,
        "metric_definitions": "filtered: mpr, mrr, hr@k; raw: raw_*; percent; see docs/evaluation.md",
    }


def _write_json(path: Path, content: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(content, indent=2) + "\n", encoding="utf-8")
    logger.info("Wrote %s.", path)


def _metric_label(name: str) -> str:
    return name.upper()  # mpr -> MPR, hr@10 -> HR@10


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


if __name__ == "__main__":
    raise SystemExit(main())
