"""Run under ``accelerate launch`` with several processes: ``encode_views(cache_only=True)``, as
``metricbert encode`` calls it, must leave the catalog's vectors with process 0 alone, which writes
the cache, through each way a call can go: a first encoding, a cache that matches (whose vectors
no process reads), a catalog that changed (process 0 alone reads the earlier vectors back), and a
changed catalog whose earlier cache is damaged (found by process 0 alone, acted on by all). Process
0 alone reads the cache, and tells the others what to encode; and each process counts the tokens of
a share of the texts to order them, not of every text.

Each process records, per call, whether it returned nothing, the most memory Python's allocators
(NumPy's arrays among them) held during the call above what they held before it, the bytes its
``read`` calls returned (``rchar`` of ``/proc/self/io``: the cache's among them; gloo's messages
are not) and how many texts its tokenizer was given;
process 0 keeps each call's cache and texts for the test to compare with one process's encoding.

Usage: accelerate launch --config_file accelerate_configs/cpu.yaml THIS_FILE MODEL_PATH ITEMS OUTPUT_FOLDER
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import tracemalloc
from pathlib import Path

from accelerate import PartialState
from counted_tokenizer import count_texts_tokenized
from transformers import AutoModel, AutoTokenizer

from metricbert_trainer.base.distributed import process_group_closed_at_exit
from metricbert_trainer.evaluation.encoding import encode_views

WORDS = "oak cherry tannin plum citrus mineral spice vanilla smoke berry earth floral".split()


def numbered_views(items: int) -> dict[str, list[str]]:
    """A title and a longer description per item, of varied lengths, none repeated."""
    titles = [f"item {item} {' '.join(WORDS[: 1 + item % 5])}" for item in range(items)]
    descriptions = [
        f"{' '.join(WORDS[item % 7 :])} and {' '.join(WORDS[: item % 9])} {item}" for item in range(items)
    ]
    return {"title": titles, "description": descriptions}


def changed(views: dict[str, list[str]], items: int, label: str) -> dict[str, list[str]]:
    """``views`` with the first ``items`` texts of each field rewritten."""
    return {
        name: [f"{label} {text}" for text in texts[:items]] + texts[items:] for name, texts in views.items()
    }


def damage_the_view(cache: Path) -> None:
    """Flips one byte in the middle of the cache, inside a view's vectors (its largest part)."""
    data = bytearray(cache.read_bytes())
    data[len(data) // 3] ^= 0xFF
    cache.write_bytes(bytes(data))


def bytes_read() -> int:
    """The bytes this process's ``read`` calls have returned so far (the cache's among them)."""
    counters = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return int(counters["rchar"])


def main(model_path: str, items: str, output_folder: str) -> None:
    logging.basicConfig(level=logging.INFO)  # the update says how many texts it read back
    state = PartialState(cpu=True)
    model, tokenizer = AutoModel.from_pretrained(model_path), AutoTokenizer.from_pretrained(model_path)
    folder, items = Path(output_folder), int(items)
    cache = folder / "cache.npz"
    views = numbered_views(items)
    # A smaller catalog than the damaged cache's: after the failed read, every text is encoded.
    small = changed({name: texts[:300] for name, texts in views.items()}, 5, "damaged")
    calls = {
        "fresh": views,
        "matching": views,
        "updated": changed(views, 100, "updated"),
        "damaged": small,
    }
    records = {}
    tokenized = count_texts_tokenized(tokenizer)
    # Traced from here on and never stopped: tracemalloc.stop() while other threads free arrays
    # crashed CPython before 3.12.9 (gh-128679), a segfault in about a third of these launches.
    tracemalloc.start()
    for call, call_views in calls.items():
        if call == "damaged" and state.is_main_process:
            damage_the_view(cache)
        state.wait_for_everyone()
        held, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        tokenized[0] = 0
        read_before = bytes_read()
        returned = encode_views(
            model,
            tokenizer,
            call_views,
            batch_size=256,
            max_length=16,
            cache_path=cache,
            across_processes=True,
            cache_only=True,
        )
        records[call] = {
            "returned_none": returned is None,
            "peak": tracemalloc.get_traced_memory()[1] - held,
            "bytes_read": bytes_read() - read_before,
            "texts_tokenized": tokenized[0],
        }
        if state.is_main_process:
            shutil.copy(cache, folder / f"{call}.npz")
            (folder / f"{call}.json").write_text(json.dumps(call_views), encoding="utf-8")
    result = {"processes": state.num_processes, "calls": records}
    (folder / f"rank{state.process_index}.json").write_text(json.dumps(result), encoding="utf-8")


if __name__ == "__main__":
    with process_group_closed_at_exit():
        main(*sys.argv[1:])
