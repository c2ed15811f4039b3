"""What several ``metricbert`` commands share: their option groups, catalog loading, model naming,
the results table and the JSON report."""

from __future__ import annotations

import argparse
import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path

from metricbert_trainer.cli.argument_types import integer_at_least
from metricbert_trainer.data.annotations import ON_UNMATCHED, Annotations
from metricbert_trainer.data.catalog import Catalog, load_catalog
from metricbert_trainer.data.graded_pools import GradedPools
from metricbert_trainer.data.output_files import unwritable_problem, write_text_whole
from metricbert_trainer.evaluation.cache_folder import (
    CACHE_VARIABLE,
    DEFAULT_LIMIT_GIB,
    cache_folder,
    folder_cache_path,
    used_and_trimmed,
)
from metricbert_trainer.evaluation.embedding_cache import check_cache_path
from metricbert_trainer.evaluation.encoding import PRECISIONS, encode_catalog, precision_label
from metricbert_trainer.evaluation.hybrid import DEFAULT_TFIDF_MODE, DEFAULT_TFIDF_WEIGHT, with_tfidf
from metricbert_trainer.evaluation.neighbours import CONCAT, METRIC_INF, mode_label
from metricbert_trainer.evaluation.pool_metrics import POOL_METRICS, PoolScores, facet_metric
from metricbert_trainer.evaluation.scorers import EncoderScorer, Scorer, recorded_max_length
from metricbert_trainer.evaluation.shared_neighbours import (
    DEFAULT_NEIGHBOURS,
    DEFAULT_WEIGHT,
    SharedNeighbourScorer,
    check_lists_cache_path,
    lists_cache_beside,
)
from metricbert_trainer.evaluation.tfidf_cache import check_tfidf_cache_path, tfidf_cache_beside
from metricbert_trainer.publishing.markdown import escape_markdown, markdown_table
from metricbert_trainer.training.config import has_bf16_instructions

logger = logging.getLogger("metricbert_trainer.cli")


def finite_number(text: str) -> float:
    """An argparse ``type`` for finite numbers (NaN and infinities refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number; got {text}")
    return value


# The tokens kept per text by a command whose model's folder records no max_seq_length.
FALLBACK_MAX_LENGTH = 128


def catalog_options() -> argparse.ArgumentParser:
    """The catalog file, its columns, and how its texts are encoded."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--catalog", required=True, help="Catalog file (CSV, TSV, JSONL or Parquet).")
    parser.add_argument("--id-column", default="id", help="Column of unique item ids (default: id).")
    parser.add_argument(
        "--text-columns",
        nargs="+",
        default=["title", "description"],
        help="Text fields, title first (default: title description).",
    )
    parser.add_argument("--batch-size", type=integer_at_least(1), default=64, help="Encoding batch size.")
    parser.add_argument(
        "--max-length",
        type=integer_at_least(2),
        default=None,
        help="Tokens kept per text (default: the max_seq_length the model's folder records for "
        f"sentence-transformers, the length a recipe trained it at; {FALLBACK_MAX_LENGTH} without one).",
    )
    parser.add_argument("--device", default=None, help="Torch device (default: cuda when available).")
    return parser


def overwrite_options() -> argparse.ArgumentParser:
    """``--overwrite``: the one way to let a command replace files that exist (``data.output_files``)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="Replace output files that already exist (never a file the command reads).",
    )
    return parser


def annotation_options() -> argparse.ArgumentParser:
    """The annotated similar items the rankings are judged on."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument(
        "--annotations",
        required=True,
        help="Annotated similar items: sommelier/proxy CSV or video-games JSON; or expert judgments as "
        "graded pools, each ranked on its own: JSON lines (query_id, facet, candidates, relevance) or "
        "TREC qrels (.qrels); docs/evaluation.md.",
    )
    parser.add_argument(
        "--on-unmatched",
        choices=ON_UNMATCHED,
        default="error",
        help="Annotations naming no catalog item: fail (default) or drop with a warning.",
    )
    parser.add_argument(
        "--ks", type=integer_at_least(1), nargs="+", default=[10, 100], help="Cut-offs of HR@k."
    )
    return parser


def model_options() -> argparse.ArgumentParser:
    """One model and how it scores items."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument(
        "--model",
        required=True,
        metavar="[NAME=]PATH",
        help="Hugging Face or sentence-transformers model folder.",
    )
    parser.add_argument(
        "--scorer",
        default=METRIC_INF,
        help=f"{METRIC_INF} (sum of per-field angular distances), {CONCAT} "
        "(fields joined, the paper's Mean) or a field name.",
    )
    caches = parser.add_mutually_exclusive_group()
    caches.add_argument(
        "--cache",
        default=None,
        metavar="FILE",
        help="An .npz to keep the catalog embeddings in and reuse (it only ever replaces such a cache); the "
        "hybrid's TF-IDF matrices and the re-ranking's shared-neighbour lists are kept beside it "
        "(NAME.tfidf.npz, NAME.shared-neighbours.npz). Without it they are kept in the cache folder: "
        f"${CACHE_VARIABLE}, else $XDG_CACHE_HOME/metricbert, else ~/.cache/metricbert, one set per model, "
        "catalog and setting (docs/evaluation.md).",
    )
    caches.add_argument(
        "--no-cache",
        action="store_true",
        help="Keep no cache: encode the catalog, fit the TF-IDF and list the shared neighbours on every call.",
    )
    parser.add_argument(
        "--cache-limit",
        type=positive_number,
        default=DEFAULT_LIMIT_GIB,
        metavar="GIB",
        help="After a call, remove the cache folder's caches used least recently until they hold at most "
        f"GIB GiB (default {DEFAULT_LIMIT_GIB:g}): only caches this library wrote there, never the call's "
        "own, never another file.",
    )
    parser.add_argument(
        "--tfidf-weight",
        type=unit_interval,
        default=DEFAULT_TFIDF_WEIGHT,
        help=f"TF-IDF's share of a hybrid ranking with the model (default {DEFAULT_TFIDF_WEIGHT}, chosen on "
        "dev seeds: docs/quality.md); 0 ranks by the model alone.",
    )
    add_tfidf_mode(parser)
    parser.add_argument(
        "--shared-neighbours",
        type=integer_at_least(0),
        default=DEFAULT_NEIGHBOURS,
        metavar="K",
        help="Re-rank by the items' K nearest neighbours in common (the whole catalog's lists are built "
        f"first: N^2 distances); 0 does not re-rank (default {DEFAULT_NEIGHBOURS}; docs/quality.md).",
    )
    add_shared_neighbour_weight(parser)
    add_precision(parser)
    parser.add_argument(
        "--shared-neighbour-candidates",
        type=integer_at_least(0),
        default=0,
        metavar="C",
        help="Search each item's shared-neighbour list among its C nearest items under the model (a FAISS "
        "HNSW index) instead of every item: N*C distances instead of N^2, for catalogs of hundreds of "
        "thousands of items (docs/scale_out.md); 0 lists exactly (default).",
    )
    return parser


def add_tfidf_mode(parser: argparse.ArgumentParser) -> None:
    """``--tfidf-mode``: the views the hybrid's TF-IDF compares, beside each command's ``--tfidf-weight``."""
    parser.add_argument(
        "--tfidf-mode",
        choices=(CONCAT, METRIC_INF),
        default=DEFAULT_TFIDF_MODE,
        help=f"What the hybrid's TF-IDF compares: {CONCAT} (one vectoriser over the fields joined, so a word "
        f"one item's title shares with another's description counts) or {METRIC_INF} (each field with the "
        f"same field; the category catalogs' option with --tfidf-weight 0.3 --shared-neighbours 50 "
        f"--shared-neighbour-weight 0.5). Default {DEFAULT_TFIDF_MODE}, chosen with the weight (docs/quality.md).",
    )


def add_precision(parser: argparse.ArgumentParser) -> None:
    """``--precision`` of the commands that encode a catalog with a model (not ``compare``, whose
    ``--precision`` is RecoBERT's)."""
    parser.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="auto",
        help="Precision of the encoding: auto (bf16 on CUDA, fp32 on a CPU), bf16 (also on a CPU, where one "
        "with AVX512-BF16 or AMX encodes 1.5 to 2.3 times as fast, one without them 4 times slower; the "
        "rankings move a little: docs/evaluation.md) or fp32.",
    )


def warn_of_emulated_bf16(precision: str, device, flags: set[str] | None = None) -> None:
    """A warning when ``--precision bf16`` asks a CPU without bf16 instructions (``flags``, this
    CPU's by default) to encode: it emulates bf16 at a quarter of fp32's speed (docs/evaluation.md)."""
    if precision != "bf16" or str(device).split(":")[0] != "cpu":
        return
    if not has_bf16_instructions(flags):
        logger.warning(
            "--precision bf16 on a CPU without bf16 instructions (AVX512-BF16, AMX): bf16 is emulated, "
            "about 4 times slower than fp32 (docs/evaluation.md); leave --precision at auto here."
        )


def add_shared_neighbour_weight(parser: argparse.ArgumentParser) -> None:
    """``--shared-neighbour-weight``, beside each command's own ``--shared-neighbours``."""
    parser.add_argument(
        "--shared-neighbour-weight",
        type=positive_unit_interval,
        default=DEFAULT_WEIGHT,
        help=f"The shared neighbours' share of the re-ranked distance (default {DEFAULT_WEIGHT}).",
    )


def unit_interval(text: str) -> float:
    """An argparse ``type`` for numbers from 0 to 1."""
    value = finite_number(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must lie between 0 and 1; got {text}")
    return value


def positive_number(text: str) -> float:
    """An argparse ``type`` for finite numbers above 0."""
    value = finite_number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0; got {text}")
    return value


def positive_unit_interval(text: str) -> float:
    """An argparse ``type`` for numbers above 0, up to 1."""
    value = unit_interval(text)
    if value == 0:
        raise argparse.ArgumentTypeError(
            "must be above 0 (turn the re-ranking off with --shared-neighbours 0)"
        )
    return value


def ranking_scorer(
    args: argparse.Namespace, model, tokenizer, name: str, cache_path: str | None = None
) -> Scorer:
    """How ``evaluate`` and ``recommend`` rank: the model under ``--scorer``, fused with TF-IDF
    at ``--tfidf-weight`` (the model alone at 0), re-ranked by ``--shared-neighbours`` (not at 0),
    whose lists and the TF-IDF's matrices are kept beside the embedding cache ``cache_path`` when
    there is one."""
    scorer = with_tfidf(
        encoder_scorer(
            args, model, tokenizer, args.scorer, name, cache_path=cache_path, precision=args.precision
        ),
        args.tfidf_weight,
        tfidf_mode=args.tfidf_mode,
        tfidf_cache=tfidf_cache_beside(cache_path) if cache_path else None,
    )
    if not args.shared_neighbours:
        return scorer
    lists_cache = lists_cache_beside(cache_path) if cache_path else None
    return SharedNeighbourScorer(
        scorer,
        args.shared_neighbours,
        args.shared_neighbour_weight,
        lists_cache=lists_cache,
        candidates=args.shared_neighbour_candidates,
        candidate_backend="faiss",
    )


def check_caches(args: argparse.Namespace) -> None:
    """Before any work: ``--cache`` and, when the ranking fuses TF-IDF or re-ranks, the caches kept
    beside it name files a cache may replace (``ranking_scorer``)."""
    if not args.cache:
        return
    check_cache_path(args.cache)
    if args.tfidf_weight:
        check_tfidf_cache_path(tfidf_cache_beside(args.cache))
    if args.shared_neighbours:
        check_lists_cache_path(lists_cache_beside(args.cache))


def command_cache(args: argparse.Namespace, model, tokenizer, catalog: Catalog) -> str | Path | None:
    """Where ``evaluate`` and ``recommend`` keep their caches: ``--cache``; none with
    ``--no-cache``; else the cache folder's file for this model, catalog and setting
    (``cache_folder.folder_cache_path``), so that the same call made again reads the vectors, the
    TF-IDF and the lists back. A cache folder where nothing can be written costs the caching, not
    the command: a warning, and no cache."""
    if args.cache or args.no_cache:
        return args.cache
    folder = cache_folder()
    problem = unwritable_problem(folder, option="the cache folder")
    if problem:
        logger.warning("%s; ranking without a cache (--cache FILE keeps one elsewhere).", problem)
        return None
    return folder_cache_path(
        folder,
        Path(model.name_or_path),
        catalog,
        mode=args.scorer,
        max_length=command_max_length(args, model, tokenizer),
        precision=precision_label(model.device, args.precision),
    )


def trim_cache_folder(args: argparse.Namespace, cache: str | Path | None) -> None:
    """After a command's work, the cache folder's caches trimmed to ``--cache-limit``
    (``cache_folder.used_and_trimmed``), those the command used kept; a ``--cache`` the user named
    is the user's to manage."""
    if cache is not None and not args.cache:
        used_and_trimmed(Path(cache), int(args.cache_limit * 2**30))


def encoder_scorer(
    args: argparse.Namespace,
    model,
    tokenizer,
    mode: str,
    name: str,
    cache_path: str | None = None,
    precision: str = "auto",
) -> EncoderScorer:
    """The library's scorer of an encoder under ``mode``, with the command's batch size and
    truncation (``command_max_length``), named as its result rows are, encoding at ``precision``."""
    warn_of_emulated_bf16(precision, model.device)
    return EncoderScorer(
        model,
        tokenizer,
        mode=mode,
        name=f"{name} ({mode_label(mode)})",
        batch_size=args.batch_size,
        max_length=command_max_length(args, model, tokenizer),
        cache_path=cache_path,
        show_progress=True,
        precision=precision,
    )


def encode_into_cache(
    args: argparse.Namespace, model, tokenizer, catalog: Catalog, cache: str | Path, *, show_progress: bool
) -> None:
    """The catalog's views under ``--scorer`` encoded into ``cache`` as the command's scorer reads
    them (``encoder_scorer``), the encoding shared among the processes of a launch: every process
    must call this together, and process 0 alone holds the vectors while it writes them."""
    encode_catalog(
        model,
        tokenizer,
        catalog,
        mode=args.scorer,
        batch_size=args.batch_size,
        max_length=command_max_length(args, model, tokenizer),
        cache_path=cache,
        show_progress=show_progress,
        across_processes=True,
        precision=args.precision,
        cache_only=True,
    )


def command_max_length(args: argparse.Namespace, model, tokenizer) -> int:
    """The tokens a command keeps per text of ``model``: ``--max-length``, else what the model's
    folder records (``scorers.recorded_max_length``), else ``FALLBACK_MAX_LENGTH``. A model a
    recipe trained on long descriptions (256 tokens) is then ranked reading what it learnt on,
    as sentence-transformers reads it, not cut at 128."""
    return args.max_length or recorded_max_length(model, tokenizer) or FALLBACK_MAX_LENGTH


HEAD_METRICS = ("map", "ndcg@20")


def results_table(rows: Sequence[tuple[str, dict[str, float]]], ks: Sequence[int]) -> str:
    """Filtered then raw metrics, then the per-seed MAP and NDCG@20, one row per scorer, to one decimal;
    the scorers' names (the user's, with ``NAME=PATH``) escaped as markdown text."""
    headers, table = results_cells(rows, ks)
    table = [[escape_markdown(label), *values] for label, *values in table]
    return markdown_table(headers, table, align="l" + "r" * (len(headers) - 1))


def results_cells(
    rows: Sequence[tuple[str, dict[str, float]]], ks: Sequence[int]
) -> tuple[list[str], list[list[str]]]:
    """The headers and formatted rows of ``results_table``, for tables in other formats (the report page)."""
    names = ["mpr", "mrr", *(f"hr@{k}" for k in ks)]
    headers = [metric_label(name) for name in names] + [f"raw {metric_label(name)}" for name in names]
    headers += [metric_label(name) for name in HEAD_METRICS]
    table = []
    for label, metrics in rows:
        values = [metrics[name] for name in names] + [metrics[f"raw_{name}"] for name in names]
        values += [metrics[name] for name in HEAD_METRICS]
        table.append([label, *(f"{value:.1f}" for value in values)])
    return ["Scorer", *headers], table


def pools_table(label: str, scores: PoolScores) -> str:
    """The metrics of graded pools: over all pools, then over each facet's, to two decimals."""
    summary = scores.summary()
    facets = list(dict.fromkeys(pool.facet for pool in scores.pools))
    counts = {facet: sum(pool.facet == facet for pool in scores.pools) for facet in facets}
    rows = [["all", str(len(scores.pools)), *(f"{summary[metric]:.2f}" for metric in POOL_METRICS)]]
    if facets != [""]:
        rows += [
            [
                facet,
                str(counts[facet]),
                *(f"{summary[facet_metric(facet, metric)]:.2f}" for metric in POOL_METRICS),
            ]
            for facet in facets
        ]
    rows = [[escape_markdown(cell) for cell in row[:1]] + row[1:] for row in rows]
    headers = [
        f"Pools ranked by {escape_markdown(label)}",
        "pools",
        *(metric_label(name) for name in POOL_METRICS),
    ]
    return markdown_table(headers, rows, align="lr" + "r" * len(POOL_METRICS))


def load_cli_catalog(args: argparse.Namespace) -> Catalog:
    """The command's catalog. A catalog too small for ``--shared-neighbours`` (every item's list
    would hold every other item) turns the re-ranking off here, once, with a warning, so that the
    ranking, its label and the results file all say what ranks the items."""
    id_column = args.id_column or None  # --id-column "" numbers the rows
    catalog = load_catalog(args.catalog, id_column=id_column, text_columns=args.text_columns)
    neighbours = getattr(args, "shared_neighbours", 0)
    if neighbours and neighbours >= len(catalog) - 1:
        logger.warning(
            "%d items are too few for %d shared neighbours each: ranking without the re-ranking "
            "(as --shared-neighbours 0 does).",
            len(catalog),
            neighbours,
        )
        args.shared_neighbours = 0
    return catalog


def model_paths(args: argparse.Namespace) -> list[str]:
    """The model folders a command loads (``--model``, ``--models``, ``--sbert``, ``--recobert``):
    files the command reads, which no output may replace (``output_files.check_new_files``)."""
    specs = [args.model] if getattr(args, "model", None) else []
    for option in ("models", "sbert", "recobert"):
        specs += getattr(args, option, None) or []
    return [name_and_path(spec)[1] for spec in specs]


def name_and_path(spec: str) -> tuple[str, str]:
    """``NAME=PATH`` or ``PATH`` (named after its folder)."""
    name, separator, path = spec.partition("=")
    if separator and name and "/" not in name:
        return name, path
    return Path(spec).name, spec


def report_header(
    args: argparse.Namespace,
    catalog: Catalog,
    annotations: Annotations | GradedPools,
    max_length: int | None,
) -> dict:
    """What a results file records of its run; ``max_length`` the tokens kept per text, ``None``
    when each model keeps its own (``command_max_length``)."""
    header = {
        "catalog": args.catalog,
        "text_columns": list(catalog.fields),
        "num_items": len(catalog),
        "annotations": args.annotations,
    }
    if isinstance(annotations, GradedPools):
        return header | {
            "num_pools": len(annotations.pools),
            "num_judgments": annotations.num_judgments,
            "max_length": max_length,
            "metric_definitions": "each pool ranked on its own: map (grade >= 2), ndcg%20, ndcg@10; "
            "percent; per facet FACET_METRIC; see docs/evaluation.md",
        }
    return header | {
        "num_seeds": len(annotations.seeds),
        "num_pairs": annotations.num_pairs,
        "ks": list(args.ks),
        "max_length": max_length,
        "metric_definitions": "filtered: mpr, mrr, hr@k; raw: raw_*; percent; see docs/evaluation.md",
    }


def write_json(path: Path, content: dict) -> None:
    write_text_whole(path, json.dumps(content, indent=2) + "\n")
    logger.info("Wrote %s.", path)


def metric_label(name: str) -> str:
    return name.upper()  # mpr -> MPR, hr@10 -> HR@10
