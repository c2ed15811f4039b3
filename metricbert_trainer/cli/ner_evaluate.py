"""``metricbert ner-evaluate``: entity-level scores of a multi-task NER tagger on held-out titles."""

from __future__ import annotations

import argparse
from pathlib import Path

from transformers import AutoConfig, AutoModelForTokenClassification, AutoTokenizer

from metricbert_trainer.base.model_folders import check_model_folder
from metricbert_trainer.cli.options import overwrite_options, write_json
from metricbert_trainer.data.output_files import check_new_file
from metricbert_trainer.ner.dataset import load_tagged_catalog
from metricbert_trainer.ner.evaluator import TaggingEvaluator
from metricbert_trainer.ner.metrics import METRIC_NAMES
from metricbert_trainer.publishing.markdown import markdown_table


def add_parser(commands: argparse._SubParsersAction) -> None:
    command = commands.add_parser(
        "ner-evaluate",
        parents=[overwrite_options()],
        help="Entity-level precision, recall and F1, exact match and token accuracy of a tagger on held-out titles.",
    )
    command.add_argument(
        "--model", required=True, help="A token-classification folder (recipes/ner/train.py)."
    )
    command.add_argument(
        "--data",
        required=True,
        help="A tagged catalog (.jsonl/.json/.parquet), e.g. data/wines_ner/wine-titles-ner.jsonl.",
    )
    command.add_argument("--split", default="test", help="The split column's value of the titles to score.")
    command.add_argument(
        "--spans-column", default=None, help="Read the tags from this column of character spans."
    )
    command.add_argument(
        "--max-length", type=int, default=128, help="Titles are truncated to this many tokens."
    )
    command.add_argument("--batch-size", type=int, default=64)
    command.add_argument("--output", default=None, help="Write the metrics to this JSON file.")
    command.set_defaults(command=run)


def run(args: argparse.Namespace) -> int:
    check_model_folder(args.model, what="--model", local=True)
    if args.output:
        check_new_file(
            args.output, option="--output", reads=[args.data, args.model], overwrite=args.overwrite
        )
    # The labels come from the config, and the data are read against them, before the weights load:
    # a sentence encoder's folder is refused for its labels, not after transformers' load report.
    config = AutoConfig.from_pretrained(args.model)
    labels = [config.id2label[index] for index in range(config.num_labels)]
    catalog = load_tagged_catalog(
        args.data, spans_column=args.spans_column, test_split=args.split, labels=labels
    )
    model = AutoModelForTokenClassification.from_pretrained(args.model, use_safetensors=True)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    metrics = TaggingEvaluator(catalog.test, batch_size=args.batch_size, max_length=args.max_length)(
        model, tokenizer
    )
    print(
        markdown_table(
            ["titles", *METRIC_NAMES],
            [[len(catalog.test), *(f"{metrics[name]:.2f}" for name in METRIC_NAMES)]],
            align="r" * 6,
        )
    )
    if args.output:
        write_json(
            Path(args.output),
            {"model": args.model, "data": args.data, "split": args.split, "metrics": metrics},
        )
    return 0
