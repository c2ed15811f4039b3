"""``metricbert recommend``: the items most similar to one item, printed nearest first, or to every
item (``--all``), written as a table (``evaluation.recommendations``)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from metricbert_trainer.base.distributed import process_group_closed_at_exit
from metricbert_trainer.cli.argument_types import integer_at_least
from metricbert_trainer.cli.launched_table import (
    joined_parts,
    launch_state,
    part_path,
    prepare_caches_once,
    process_share,
)
from metricbert_trainer.cli.neighbour_listing import neighbour_listing, similarity_sentence
from metricbert_trainer.cli.options import (
    catalog_options,
    check_caches,
    command_cache,
    load_cli_catalog,
    model_options,
    model_paths,
    name_and_path,
    overwrite_options,
    ranking_scorer,
    trim_cache_folder,
)
from metricbert_trainer.data.catalog import Catalog
from metricbert_trainer.data.output_files import check_new_file
from metricbert_trainer.errors import UsageError
from metricbert_trainer.evaluation.neighbours import CONCAT, TopK, catalog_views, mode_label
from metricbert_trainer.evaluation.recommendations import (
    FORMATS,
    recommendation_format,
    shard_items,
    write_recommendations,
)
from metricbert_trainer.evaluation.scorers import Scorer, load_encoder


def add_parser(commands: argparse._SubParsersAction) -> None:
    recommend = commands.add_parser(
        "recommend",
        parents=[catalog_options(), model_options(), overwrite_options()],
        help="The items most similar to one item, or to every item (--all --output FILE).",
        epilog="From an index that metricbert index built: metricbert recommend --index DIR --item ID "
        "[--top-k K] answers as this command does with the index's options, without loading the "
        "model or the catalog (0.7 s at a million items on 2 CPU cores, docs/scale_out.md).",
    )
    which = recommend.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--item",
        help="Id of the item to list the neighbours of, nearest first: rank, id and title, and, when the model "
        "alone ranks (--tfidf-weight 0 --shared-neighbours 0), its similarity from 0 to 1.",
    )
    which.add_argument(
        "--all",
        action="store_true",
        help="Every item's neighbours, written to --output: every item against every other (N^2 distances), "
        "or among --candidates. Under accelerate launch -m metricbert_trainer.cli, the processes share the "
        "encoding and the items, process 0 prepares the TF-IDF and the lists and joins the table "
        "(docs/evaluation.md).",
    )
    recommend.add_argument(
        "--output",
        default=None,
        help=f"With --all: the table to write (id, rank, neighbour_id, distance), by suffix one of {', '.join(FORMATS)}; "
        "in CSV and TSV an id a spreadsheet would run as a formula (=, +, -, @) is written with a leading '.",
    )
    recommend.add_argument(
        "--top-k", type=integer_at_least(1), default=10, help="How many neighbours to list."
    )
    recommend.add_argument(
        "--candidates",
        type=integer_at_least(0),
        default=0,
        metavar="C",
        help="With --all: search each item's neighbours among its C nearest items under the model (a FAISS "
        "HNSW index) and its shared-neighbour list, scored by the whole ranking with each item's spread "
        "estimated on 2,048 sampled items: N*C distances instead of N^2, for catalogs of a million items, "
        "with --shared-neighbour-candidates for the lists (docs/evaluation.md; lists searched among at least C "
        "lend their candidates, so nothing is searched twice); 0 compares every pair (default).",
    )
    recommend.add_argument(
        "--num-shards",
        type=integer_at_least(1),
        default=1,
        metavar="N",
        help="With --all: split the items into N contiguous shards and write only the rows of shard "
        "--shard-index, each ranked against the whole catalog, so that N jobs (on N machines, reading "
        "the same --cache) write the table in N parts whose concatenation in shard order is the whole "
        "table (default 1: every item).",
    )
    recommend.add_argument(
        "--shard-index",
        type=integer_at_least(0),
        default=0,
        metavar="I",
        help="With --num-shards: which shard to write, from 0 to N-1 (default 0).",
    )
    recommend.set_defaults(command=run)


def run(args: argparse.Namespace) -> int:
    if args.all:
        return run_all(args)
    if args.output or args.candidates or args.num_shards > 1 or args.shard_index:
        raise UsageError(
            "--output, --candidates and the shard options are for every item's neighbours; pass --all, "
            "or leave them out for one --item"
        )
    check_caches(args)
    catalog = load_cli_catalog(args)
    try:
        item = catalog.ids.index(args.item)
    except ValueError:
        raise ValueError(
            f"No item with id {args.item!r} in {catalog.source} (ids come from the "
            f"{args.id_column!r} column; items with an empty text field are skipped)."
        ) from None
    _, _, scorer, cache = command_scorer(args, catalog)
    print(recommendation_text(args, catalog, item, scorer.nearest(catalog, [item], args.top_k)))
    trim_cache_folder(args, cache)
    return 0


def recommendation_text(args: argparse.Namespace, catalog: Catalog, item: int, neighbours: TopK) -> str:
    """What ``--item`` prints (``neighbour_listing``), with the model's similarity when the model
    alone ranks the neighbours (``ranks_by_the_model_alone``)."""
    titles, ids = catalog.display_titles, catalog.ids
    listed = [(ids[index], titles[index]) for index in neighbours.indices[0]]
    if not ranks_by_the_model_alone(args):
        return neighbour_listing((ids[item], titles[item]), ranking_label(args), listed)
    views = list(catalog_views(catalog, args.scorer))
    return neighbour_listing(
        (ids[item], titles[item]),
        ranking_label(args),
        listed,
        similarity=similarity_sentence(views, joined=args.scorer == CONCAT),
        # The distance sums the views' angular distances.
        similarities=[1 - distance / len(views) for distance in neighbours.distances[0]],
    )


def run_all(args: argparse.Namespace) -> int:
    """``--all``: every item's ``--top-k`` neighbours, written to ``--output``; under ``accelerate
    launch``, the items shared among the processes (``launched_table``)."""
    if not args.output:
        raise UsageError("--all writes a table: name it with --output (for example recommendations.csv)")
    if args.candidates and args.candidates < args.top_k:
        raise UsageError(f"--candidates ({args.candidates}) must be 0 or at least --top-k ({args.top_k})")
    if args.shard_index >= args.num_shards:
        raise UsageError(f"--shard-index ({args.shard_index}) must be below --num-shards ({args.num_shards})")
    recommendation_format(args.output)
    check_new_file(
        args.output, option="--output", reads=[args.catalog, *model_paths(args)], overwrite=args.overwrite
    )
    check_caches(args)
    state = launch_state(args)
    with process_group_closed_at_exit():
        catalog = load_cli_catalog(args)
        shard = shard_items(len(catalog), args.num_shards, args.shard_index)
        model, tokenizer, scorer, cache = command_scorer(args, catalog, device=state.device)
        launched = state.num_processes > 1
        if launched:
            prepare_caches_once(args, model, tokenizer, scorer, catalog, cache)
        written = write_recommendations(
            scorer,
            catalog,
            args.top_k,
            part_path(args.output, state.process_index, state.num_processes) if launched else args.output,
            candidates=args.candidates,
            items=process_share(shard, state),
            show_progress=state.is_main_process,
        )
        if launched:
            written = joined_parts(args.output, written)
        if state.is_main_process:
            among = f", each searched among {args.candidates} candidates" if args.candidates else ""
            of = f"{len(shard)} items" if args.num_shards == 1 else shard_label(shard, len(catalog), args)
            units = "" if ranks_by_the_model_alone(args) else "; distances in standard deviations"
            on = f" on {state.num_processes} processes" if launched else ""
            print(f"{args.output}: {written} neighbours of {of}, by {ranking_label(args)}{units}{among}{on}.")
            trim_cache_folder(args, cache)
    return 0


def shard_label(items: Sequence[int], count: int, args: argparse.Namespace) -> str:
    """How a shard's items are named in the closing line: their count, index and catalog rows."""
    return (
        f"{len(items)} items (shard {args.shard_index} of {args.num_shards}: catalog rows "
        f"{items[0]} to {items[-1]} of {count})"
    )


def command_scorer(
    args: argparse.Namespace, catalog: Catalog, device: str | torch.device | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, Scorer, str | Path | None]:
    """The model (on ``--device``, else ``device``), its tokenizer, the ranking the command's
    options ask for (``--model`` under ``ranking_scorer``) and where its caches are kept
    (``command_cache``)."""
    name, path = name_and_path(args.model)
    model, tokenizer = load_encoder(path, device=args.device or device)
    cache = command_cache(args, model, tokenizer, catalog)
    return model, tokenizer, ranking_scorer(args, model, tokenizer, name, cache_path=cache), cache


def ranks_by_the_model_alone(args: argparse.Namespace) -> bool:
    """Whether the model's distances rank the items as they are, neither fused with TF-IDF nor
    re-ranked: only then is a neighbour's distance a similarity a person can read (the fused and
    re-ranked distances are standardised per item, each item's scale its own)."""
    return not (args.tfidf_weight or args.shared_neighbours)


def ranking_label(args: argparse.Namespace) -> str:
    """How the command's ranking is described: the scorer, the fusion and the re-ranking."""
    by = mode_label(args.scorer)
    if args.tfidf_weight:
        over = "the joined fields" if args.tfidf_mode == CONCAT else "each field"
        by += f" fused with TF-IDF over {over} (weight {args.tfidf_weight:g})"
    if args.shared_neighbours:
        by += f", re-ranked by {args.shared_neighbours} shared neighbours (weight {args.shared_neighbour_weight:g})"
        if args.shared_neighbour_candidates:
            by += f" listed among {args.shared_neighbour_candidates} candidates"
    return by
