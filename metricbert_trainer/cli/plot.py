"""``metricbert plot``: a checkpoint's loss terms, and the catalog's embeddings before and after training."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from huggingface_hub import ModelCard

from metricbert_trainer.base.modeling import resolve_model_name
from metricbert_trainer.cli.argument_types import integer_at_least
from metricbert_trainer.cli.options import (
    add_precision,
    catalog_options,
    command_max_length,
    load_cli_catalog,
    overwrite_options,
    warn_of_emulated_bf16,
)
from metricbert_trainer.data.catalog import catalog_column
from metricbert_trainer.data.output_files import check_new_files
from metricbert_trainer.evaluation.scorers import load_encoder
from metricbert_trainer.publishing.plots import plot_catalog_before_after, plot_loss_terms


def add_parser(commands: argparse._SubParsersAction) -> None:
    plot = commands.add_parser(
        "plot",
        parents=[catalog_options(), overwrite_options()],
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
    plot.add_argument(
        "--max-items", type=integer_at_least(1), default=2000, help="Items drawn (a fixed random sample)."
    )
    plot.add_argument(
        "--output-dir", default=None, help="Where the PNGs go (default: the checkpoint folder)."
    )
    add_precision(plot)
    plot.set_defaults(command=run)


def run(args: argparse.Namespace) -> int:
    checkpoint = Path(args.checkpoint)
    output_dir = Path(args.output_dir) if args.output_dir else checkpoint
    state_file = checkpoint / "trainer_state.json"
    # Everything that can refuse the command does so before the first plot is written.
    before = args.before or _card_base_model(checkpoint)
    if before is None:
        raise ValueError(
            f"{checkpoint}'s model card names no base model: name the starting model with --before."
        )
    plots = ["embeddings_pca.png", *(["loss_terms.png"] if state_file.is_file() else [])]
    check_new_files(
        [output_dir / name for name in plots],
        option="--output-dir",
        reads=[args.catalog],
        overwrite=args.overwrite,
    )
    if state_file.is_file():
        history = json.loads(state_file.read_text(encoding="utf-8"))["log_history"]
        written = plot_loss_terms(history, output_dir / "loss_terms.png")
        print(f"Wrote {written}" if written else f"{state_file} holds no logged loss yet.")
    else:
        print(f"{checkpoint} has no trainer_state.json (a checkpoint-N folder has): no loss plot.")
    catalog = load_cli_catalog(args)
    labels = catalog_column(args.catalog, catalog, args.column, id_column=args.id_column)
    pairs = [load_encoder(path, device=args.device) for path in (resolve_model_name(before), str(checkpoint))]
    warn_of_emulated_bf16(args.precision, pairs[0][0].device)
    path = plot_catalog_before_after(
        pairs[0],
        pairs[1],
        catalog,
        labels,
        output_dir / "embeddings_pca.png",
        column=args.column,
        max_length=command_max_length(args, *pairs[1]),
        max_items=args.max_items,
        show_progress=True,
        precision=args.precision,
    )
    print(f"Wrote {path}")
    return 0


def _card_base_model(folder: Path) -> str | None:
    card = folder / "README.md"
    return ModelCard.load(card).data.base_model if card.is_file() else None
