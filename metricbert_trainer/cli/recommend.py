"""``metricbert recommend``: the items most similar to one item."""

from __future__ import annotations

import argparse

from metricbert_trainer.cli.options import (
    catalog_options,
    check_caches,
    integer_at_least,
    load_cli_catalog,
    model_options,
    name_and_path,
    ranking_scorer,
)
from metricbert_trainer.evaluation.neighbours import mode_label
from metricbert_trainer.evaluation.scorers import load_encoder
from metricbert_trainer.publishing.markdown import markdown_table


def add_parser(commands: argparse._SubParsersAction) -> None:
    recommend = commands.add_parser(
        "recommend", parents=[catalog_options(), model_options()], help="The items most similar to one item."
    )
    recommend.add_argument("--item", required=True, help="Id of the item to find neighbours for.")
    recommend.add_argument(
        "--top-k", type=integer_at_least(1), default=10, help="How many neighbours to list."
    )
    recommend.set_defaults(command=run)


def run(args: argparse.Namespace) -> int:
    check_caches(args)
    catalog = load_cli_catalog(args)
    try:
        item = catalog.ids.index(args.item)
    except ValueError:
        raise ValueError(
            f"No item with id {args.item!r} in {catalog.source} (ids come from the "
            f"{args.id_column!r} column; items with an empty text field are skipped)."
        ) from None
    name, path = name_and_path(args.model)
    model, tokenizer = load_encoder(path, device=args.device)
    scorer = ranking_scorer(args, model, tokenizer, name, cache_path=args.cache)
    neighbours = scorer.nearest(catalog, [item], args.top_k)
    titles, ids = catalog.display_titles, catalog.ids
    by = mode_label(args.scorer)
    if args.tfidf_weight:
        by += f" fused with TF-IDF (weight {args.tfidf_weight:g})"
    if args.shared_neighbours:
        by += f", re-ranked by {args.shared_neighbours} shared neighbours (weight {args.shared_neighbour_weight:g})"
        if args.shared_neighbour_candidates:
            by += f" listed among {args.shared_neighbour_candidates} candidates"
    if args.tfidf_weight or args.shared_neighbours:
        by += "; distances in standard deviations"
    print(f"Most similar to {titles[item]} (id {ids[item]}), by {by}:\n")
    rows = [
        (rank, ids[index], titles[index], f"{distance:.4f}")
        for rank, (index, distance) in enumerate(
            zip(neighbours.indices[0], neighbours.distances[0], strict=True), 1
        )
    ]
    print(markdown_table(["Rank", "Id", "Title", "Distance"], rows, align="rllr"))
    return 0
