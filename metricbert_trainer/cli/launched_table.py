"""``metricbert recommend --all`` under ``accelerate launch``: the table's items shared among the
processes of a launch, the parts joined by process 0.

Every item's recommendations at a million items are a batch job (ten minutes on two CPU cores
with the caches kept, hours without them; docs/scale_out.md), and the work of one item does not
depend on another's. ``accelerate launch -m metricbert_trainer.cli recommend --all ...`` on P
processes (one per GPU, core group or machine, as accelerate starts them) writes the table one
process writes:

1. every process encodes a share of the catalog into the cache, as ``metricbert encode`` shares it;
2. process 0 prepares the ranking's other caches (the TF-IDF fit, the shared-neighbour lists)
   while the others wait, with the threads of its machine's idle processes added to its own, then
   the others read them: no two processes fit or list the same catalog, and all rank by the same
   lists (lists searched with FAISS may differ by a neighbour from one search to another);
3. each process ranks a contiguous share of the items (of the ``--num-shards`` shard, when one is
   asked) against the whole catalog and writes its part beside the output;
4. process 0 joins the parts in order into the output and removes them.

The caches are how the processes share what was prepared, so a launch needs one (``--cache``, or
the cache folder). Each process holds the ranking's vectors, TF-IDF rows and lists: P processes on
one machine hold P copies.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from accelerate import PartialState
from accelerate.utils import gather_object
from threadpoolctl import threadpool_limits

from metricbert_trainer.cli.options import encode_into_cache
from metricbert_trainer.data.catalog import Catalog
from metricbert_trainer.errors import UsageError
from metricbert_trainer.evaluation.recommendations import join_tables, shard_items
from metricbert_trainer.evaluation.scorers import Scorer

# How long the processes of a launch wait for each other, above all for process 0 preparing the
# caches: at a million items on two CPU cores about 33 minutes (docs/evaluation.md), beyond
# torch.distributed's default of 30 minutes.
WAIT = datetime.timedelta(hours=12)


def launch_state(args: argparse.Namespace) -> PartialState:
    """The process's place in a launch (one process of one outside ``accelerate launch``)."""
    return PartialState(cpu=args.device == "cpu" or not torch.cuda.is_available(), timeout=WAIT)


def process_share(items: np.ndarray, state: PartialState) -> np.ndarray:
    """This process's contiguous share of ``items`` (``shard_items``): the shares of processes
    0 to P-1, in order, are ``items``."""
    return items[shard_items(len(items), state.num_processes, state.process_index)]


def prepare_caches_once(
    args: argparse.Namespace, model, tokenizer, scorer: Scorer, catalog: Catalog, cache: str | Path | None
) -> None:
    """Steps 1 and 2 of this module's docstring: the encoding shared, then process 0 alone fits
    and lists into the caches that the others read afterwards. Every process must call this."""
    if cache is None:
        raise UsageError(
            "The processes of a launch share the encoding, the TF-IDF and the lists through the "
            "caches: name one with --cache FILE (or leave --no-cache out, with a writable cache folder)"
        )
    state = PartialState()
    encode_into_cache(args, model, tokenizer, catalog, cache, show_progress=state.is_main_process)
    if state.is_main_process:
        with machine_threads():
            scorer.nearest(catalog, [0], 1)  # fits, lists and keeps what the ranking reads
    state.wait_for_everyone()


@contextlib.contextmanager
def machine_threads() -> Iterator[None]:
    """Within the block, this process's thread pools (torch's, OpenMP's, which FAISS uses, and
    BLAS's) hold the threads of every process of the launch on its machine, which wait meanwhile.
    A launch gives each process its share of the cores (``--num_cpu_threads_per_process``): on two
    cores, with process 0 preparing 100,000 items' lists on its one thread, a launch of two took
    241 s for the first call where one process took 219 s; with both threads, 172 s
    (docs/evaluation.md)."""
    threads = torch.get_num_threads()
    widened = threads * int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    with threadpool_limits(limits=widened):
        torch.set_num_threads(widened)
        try:
            yield
        finally:
            torch.set_num_threads(threads)


def part_path(output: str | Path, process: int, processes: int) -> Path:
    """Where process ``process`` of ``processes`` writes its part: a hidden file beside
    ``output``, of its format (the suffix names it)."""
    output = Path(output)
    return output.with_name(f".{output.name}.part-{process}-of-{processes}{output.suffix}")


def joined_parts(output: str | Path, written: int) -> int:
    """Step 4: once every process wrote its part (``written`` rows), process 0 joins the parts
    into ``output`` and removes them; every process returns the rows of the whole table. Every
    process must call this."""
    state = PartialState()
    total = sum(gather_object([written]))
    if state.is_main_process:
        parts = [part_path(output, process, state.num_processes) for process in range(state.num_processes)]
        try:
            join_tables(parts, output)
        finally:
            for part in parts:
                part.unlink(missing_ok=True)
    state.wait_for_everyone()
    return total
