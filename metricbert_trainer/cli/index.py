"""``metricbert index``: a catalog's ranking kept in a folder (``evaluation.item_index``), so that
``metricbert recommend --index DIR --item ID`` answers without loading the model or the catalog,
where ``recommend --item`` prepares the whole ranking on every call (a minute at a million items
on 2 CPU cores with every cache kept, against 0.7 s from the index; docs/scale_out.md).

The index is built with the ranking options of ``recommend`` and through its caches (an index of
a catalog that ``recommend`` or ``evaluate`` ranked with the same options reads their vectors,
TF-IDF and lists back), and answers as ``recommend --item`` with those options does.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from metricbert_trainer.cli.neighbour_listing import similarity_sentence
from metricbert_trainer.cli.options import (
    catalog_options,
    check_caches,
    load_cli_catalog,
    model_options,
    overwrite_options,
    trim_cache_folder,
)
from metricbert_trainer.cli.recommend import command_scorer, ranking_label, ranks_by_the_model_alone
from metricbert_trainer.data.file_stamps import file_stamp
from metricbert_trainer.errors import UsageError
from metricbert_trainer.evaluation.index_building import encoder_of, indexed_ranking
from metricbert_trainer.evaluation.item_index import META, IndexSources, folder_stamps, write_item_index
from metricbert_trainer.evaluation.neighbours import CONCAT, catalog_views


def add_parser(commands: argparse._SubParsersAction) -> None:
    index = commands.add_parser(
        "index",
        parents=[catalog_options(), model_options(), overwrite_options()],
        help="Keep a catalog's ranking in a folder, which recommend --index DIR --item ID answers from.",
    )
    index.add_argument(
        "--output",
        required=True,
        metavar="DIR",
        help="The index folder to write (replaced whole with --overwrite; only an index is ever replaced).",
    )
    index.set_defaults(command=run)


def run(args: argparse.Namespace) -> int:
    output = check_index_folder(args)
    check_caches(args)
    # Stamped before it is read: a catalog that changes during the build leaves the index stale.
    catalog_stamp = file_stamp(args.catalog)
    catalog = load_cli_catalog(args)
    _, _, scorer, cache = command_scorer(args, catalog)
    encoder = encoder_of(scorer)
    model_folder = Path(encoder.model.name_or_path).resolve()
    similarity = None
    if ranks_by_the_model_alone(args):
        views = list(catalog_views(catalog, args.scorer))
        similarity = similarity_sentence(views, joined=args.scorer == CONCAT)
    sources = IndexSources(
        catalog=Path(args.catalog).resolve(),
        catalog_stamp=catalog_stamp,
        model_folder=model_folder,
        model_files=folder_stamps(model_folder),
        ranking=ranking_label(args),
        similarity=similarity,
        command=shlex.join(["metricbert", *args.command_line]),
        settings={"max_length": encoder.max_length, "precision": encoder.precision},
    )
    write_item_index(
        output,
        indexed_ranking(scorer, catalog),
        catalog.ids,
        catalog.display_titles,
        sources,
        overwrite=args.overwrite,
    )
    size = sum(path.stat().st_size for path in output.iterdir()) / 2**30
    print(
        f"{output}: the ranking of {len(catalog)} items by {sources.ranking} ({size:.2f} GiB). "
        f"Ask it with: metricbert recommend --index {shlex.quote(str(output))} --item ID"
    )
    trim_cache_folder(args, cache)
    return 0


def check_index_folder(args: argparse.Namespace) -> Path:
    """``--output`` before any work: a folder that is not there, or an index that ``--overwrite``
    lets the command replace; never a file, another folder, or a folder holding the catalog."""
    output = Path(args.output)
    if output.exists() and not output.is_dir():
        raise UsageError(f"--output {output} is a file; name a folder for the index")
    if Path(args.catalog).resolve().is_relative_to(output.resolve()):
        raise UsageError(f"--output {output} holds the catalog {args.catalog}; name another folder")
    if output.is_dir() and any(output.iterdir()):
        if not (output / META).is_file():
            raise UsageError(f"--output {output} is a folder that is not an index; name another folder")
        if not args.overwrite:
            raise UsageError(
                f"--output {output} exists; pass --overwrite to replace it, or name another folder"
            )
    return output
