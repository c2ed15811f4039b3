"""``metricbert encode``: a catalog's vectors into an embedding cache, the encoding shared among processes.

At millions of items the encoding is what ``evaluate`` and ``recommend`` wait for first (two texts
an item; hours on a CPU, docs/scale_out.md), and one process uses one GPU. Launched with
``accelerate launch -m metricbert_trainer.cli encode ...`` on P processes (GPUs, or nodes), each
encodes every P-th text in order of length and the vectors are gathered, as the training
evaluation shares its encoding (``encoding.encode_texts``); process 0 alone receives the vectors,
and writes the cache. The next
``evaluate`` or ``recommend`` with the same ``--cache``, model, ``--max-length`` and ``--scorer``
reads the vectors back instead of encoding; after the catalog changed, it (or this command again)
encodes only the texts the cache lacks. Run as a plain command it is one process.
"""

from __future__ import annotations

import argparse
import time

import torch
from accelerate import PartialState

from metricbert_trainer.base.distributed import process_group_closed_at_exit
from metricbert_trainer.cli.options import (
    add_precision,
    catalog_options,
    command_max_length,
    encode_into_cache,
    load_cli_catalog,
    name_and_path,
    warn_of_emulated_bf16,
)
from metricbert_trainer.evaluation.embedding_cache import check_cache_path
from metricbert_trainer.evaluation.encoding import precision_label
from metricbert_trainer.evaluation.neighbours import METRIC_INF, catalog_views
from metricbert_trainer.evaluation.scorers import load_encoder


def add_parser(commands: argparse._SubParsersAction) -> None:
    encode = commands.add_parser(
        "encode",
        parents=[catalog_options()],
        help="Encode a catalog into an embedding cache (shared among the processes of accelerate launch).",
    )
    encode.add_argument("--model", required=True, metavar="[NAME=]PATH", help="The model to encode with.")
    encode.add_argument(
        "--scorer",
        default=METRIC_INF,
        help="The views to encode, as evaluate and recommend will rank them (default: metric_inf, one per field).",
    )
    encode.add_argument(
        "--cache", required=True, help="The .npz to write (it only ever replaces an embedding cache)."
    )
    add_precision(encode)
    encode.set_defaults(command=run)


def run(args: argparse.Namespace) -> int:
    check_cache_path(args.cache)
    state = PartialState(cpu=args.device == "cpu" or not torch.cuda.is_available())
    with process_group_closed_at_exit():
        catalog = load_cli_catalog(args)
        catalog_views(catalog, args.scorer)  # a bad --scorer fails before the model loads
        name, path = name_and_path(args.model)
        model, tokenizer = load_encoder(path, device=args.device or state.device)
        warn_of_emulated_bf16(args.precision, model.device)
        max_length = command_max_length(args, model, tokenizer)
        started = time.perf_counter()
        encode_into_cache(args, model, tokenizer, catalog, args.cache, show_progress=state.is_main_process)
        if state.is_main_process:
            views = catalog_views(catalog, args.scorer)
            texts = sum(len(view) for view in views.values())
            print(
                f"{args.cache}: {texts} vectors of {len(catalog)} items ({', '.join(views)}) by {name} "
                f"in {precision_label(model.device, args.precision)}, "
                f"ready in {time.perf_counter() - started:.1f} s on {state.num_processes} process(es); "
                f"{max_length} tokens a text; evaluate and recommend with this --model read them with --cache "
                f"{args.cache}{'' if args.max_length is None else f' --max-length {max_length}'}."
            )
    return 0
