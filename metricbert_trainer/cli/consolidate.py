"""``metricbert consolidate``: a DeepSpeed ZeRO checkpoint merged into a plain model folder."""

from __future__ import annotations

import argparse

from metricbert_trainer.cli.options import overwrite_options
from metricbert_trainer.data.output_files import check_empty_folder
from metricbert_trainer.publishing.consolidate import consolidate_zero_checkpoint


def add_parser(commands: argparse._SubParsersAction) -> None:
    consolidate = commands.add_parser(
        "consolidate",
        parents=[overwrite_options()],
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
    consolidate.set_defaults(command=run)


def run(args: argparse.Namespace) -> int:
    check_empty_folder(args.output_dir, option="output_dir", overwrite=args.overwrite)
    output_dir = consolidate_zero_checkpoint(
        args.checkpoint, args.output_dir, tag=args.tag, allow_pickle=args.allow_pickle
    )
    print(f"Wrote {output_dir}: load it with AutoModel.from_pretrained({str(output_dir)!r}).")
    return 0
