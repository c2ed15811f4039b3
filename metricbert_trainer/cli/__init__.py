"""The ``metricbert`` command: evaluate a model, list an item's neighbours, compare against baselines.

    metricbert evaluate --model PATH --catalog CSV --annotations FILE [--scorer metric_inf] [--tfidf-weight W]
        [--output JSON]   (FILE: annotated seeds, or expert-graded pools as .jsonl or .qrels)
    metricbert recommend --model PATH --catalog CSV --item ID [--top-k 10] [--tfidf-weight W]
    metricbert index --model PATH --catalog CSV --output DIR   (the ranking kept, for the next line)
    metricbert recommend --index DIR --item ID [--top-k 10]   (0.7 s at a million items on 2 CPU cores)
    metricbert encode --model PATH --catalog CSV --cache items.npz   (accelerate launch -m shares it among processes)
    metricbert compare --catalog CSV --annotations FILE --baselines tfidf lda --models PATH [...]
        [--sbert PATH ...] [--recobert PATH ...] --output-dir DIR
    metricbert report --catalog CSV --annotations FILE --baselines tfidf --models PATH [...] --output report.html
    metricbert consolidate CHECKPOINT OUTPUT_DIR --allow-pickle   (a DeepSpeed ZeRO checkpoint -> a plain model)
    metricbert plot CHECKPOINT --catalog CSV --column variety [--before MODEL]
    metricbert ner-evaluate --model DIR --data JSONL [--split test]   (a multi-task NER tagger's entity scores)

Model paths may be plain Hugging Face folders or sentence-transformers folders; ``NAME=PATH``
names a model's rows in the tables. Everything is computed by the library's scorers, ranking and
metrics; ``evaluate`` and ``recommend`` rank in the hybrid with TF-IDF by default
(``evaluation.hybrid``), ``--tfidf-weight 0`` by the model alone, as the trainer's evaluation does,
and keep what they compute from the catalog in the user's cache folder for the next call, unless
given ``--cache FILE`` or ``--no-cache`` (``evaluation.cache_folder``).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from metricbert_trainer.cli import indexed_recommend

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it

# One module per command, each adding its own subparser; the order is --help's. Imported when a
# command line is parsed, not with this package: ``recommend --index`` answers without them.
COMMANDS = (
    "evaluate",
    "recommend",
    "index",
    "encode",
    "compare",
    "report",
    "consolidate",
    "plot",
    "ner_evaluate",
)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if indexed_recommend.asks_for_index(argv):
        return indexed_recommend.main(argv[1:])
    # Here, not at the top: they import the catalog's readers, which an indexed answer does without.
    from metricbert_trainer.data.annotations import AnnotationError
    from metricbert_trainer.data.catalog import CatalogError

    args = build_parser().parse_args(argv)
    args.command_line = argv
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.command(args)
    except (CatalogError, AnnotationError, FileNotFoundError, PermissionError, ValueError) as error:
        print(f"metricbert {args.command_name}: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # Ctrl-C is the user's choice, not a crash: one line and the shell's status for SIGINT.
        # Every file the commands write is written whole or not at all (caches by rename).
        print(f"metricbert {args.command_name}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="metricbert", description="Evaluate and use MetricBERT recommenders."
    )
    commands = parser.add_subparsers(dest="command_name", required=True)
    for name in COMMANDS:
        importlib.import_module(f"metricbert_trainer.cli.{name}").add_parser(commands)
    return parser
