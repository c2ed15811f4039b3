"""``metricbert recommend --index DIR --item ID``: one item's neighbours read from an index that
``metricbert index`` built (``evaluation.item_index``), printed as ``recommend --item`` prints them.

The answer needs neither the model nor the catalog, so this command imports neither torch nor the
catalog's readers: ``cli.main`` sends a ``recommend`` call that names ``--index`` here before it
imports the other commands, and the start is NumPy's (0.7 s in all at a million items on 2 CPU cores,
docs/scale_out.md). The ranking is the one the index was built with; an index whose catalog or
model changed since is refused, with the command that builds it again.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from metricbert_trainer.cli.argument_types import integer_at_least
from metricbert_trainer.cli.neighbour_listing import neighbour_listing
from metricbert_trainer.evaluation.item_index import ItemIndex


def asks_for_index(argv: Sequence[str]) -> bool:
    """Whether ``argv`` (the ``metricbert`` command's arguments) is a ``recommend`` call that names
    an index."""
    return (
        bool(argv)
        and argv[0] == "recommend"
        and any(argument == "--index" or argument.startswith("--index=") for argument in argv[1:])
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="metricbert recommend",
        description="One item's neighbours from an index built by metricbert index, ranked as the "
        "index was built to rank, without loading the model or the catalog.",
    )
    parser.add_argument("--index", required=True, metavar="DIR", help="The folder metricbert index wrote.")
    parser.add_argument(
        "--item", required=True, help="Id of the item to list the neighbours of, nearest first."
    )
    parser.add_argument("--top-k", type=integer_at_least(1), default=10, help="How many neighbours to list.")
    return parser


def main(argv: Sequence[str]) -> int:
    """``recommend --index``'s options (``argv`` without the command's name); the exit status."""
    args = build_parser().parse_args(argv)
    try:
        print(indexed_answer(args.index, args.item, args.top_k))
    except (FileNotFoundError, ValueError) as error:
        print(f"metricbert recommend: error: {error}", file=sys.stderr)
        return 1
    return 0


def indexed_answer(folder: str, item_id: str, top_k: int) -> str:
    """What ``recommend --index folder --item item_id --top-k top_k`` prints."""
    index = ItemIndex(folder)
    problem = index.stale()
    if problem:
        raise ValueError(
            f"The index {folder} no longer answers: {problem}. Build it again: {index.meta['command']}"
        )
    item = index.row_of(item_id)
    if item is None:
        raise ValueError(
            f"No item with id {item_id!r} in the index {folder} (built from {index.meta['catalog']['path']}; "
            "items with an empty text field are left out)."
        )
    indices, distances = index.nearest(item, top_k)
    similarity = index.meta["similarity"]
    views = index.meta["encoder_views"]
    return neighbour_listing(
        (index.ids[item], index.titles[item]),
        index.meta["ranking"],
        [(index.ids[int(at)], index.titles[int(at)]) for at in indices],
        similarity=similarity,
        # The distance sums the views' angular distances.
        similarities=[1 - float(distance) / views for distance in distances] if similarity else (),
    )
