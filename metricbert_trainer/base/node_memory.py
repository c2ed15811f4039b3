"""Arrays held once per machine by all of a distributed run's processes on it.

A run launches one process per accelerator, and each held its own copy of what every process
reads alike, such as the guide's cache of the start's vectors: 2.9 GiB per process at a million
MiniLM items (7.6 for BERT-Large), so 23 GiB of host memory on a machine of eight GPUs, and ten
times that at ten million items. ``node_array`` maps one file of the machine's shared memory
(``/dev/shm``) into each of its processes, and one of them writes it.

The file is removed as soon as every process of the machine has mapped it: the memory lives as
long as a process maps it and goes with the last, even after a crash, so nothing is left in
``/dev/shm``. Where the machine has no ``/dev/shm``, or too little of it (a container started
without ``--shm-size`` has 64 MiB), each process keeps its own copy, as before, and says so once.
"""

from __future__ import annotations

import logging
import os
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch.distributed as dist

logger = logging.getLogger(__name__)

SHARED_MEMORY = Path("/dev/shm")


@dataclass(frozen=True)
class NodeArray:
    """An array every process of a machine reads; ``writer`` says whether this process writes its
    values (one process per machine), ``sharers`` how many processes map this one copy (1 when the
    process keeps its own)."""

    array: np.ndarray
    writer: bool
    sharers: int


def node_array(
    shape: tuple[int, ...], dtype: np.dtype | type, *, what: str, folder: Path = SHARED_MEMORY
) -> NodeArray:
    """An uninitialised array of ``shape`` and ``dtype`` (``what`` it will hold names it in a log
    line), held once by all the processes of this machine when they are several: mapped from a
    file of ``folder``. Every process of the run must call this, in the same order; outside a
    distributed run, or alone on its machine, a process gets an array of its own.

    The machine's processes are told apart by host name and ``LOCAL_RANK`` (set by ``torchrun``
    and ``accelerate launch``); the one of local rank 0 creates the file and is the writer. After
    filling the array the writer must reach a barrier (``torch.distributed.barrier()``) before
    the others read it.
    """
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1 or nbytes == 0:
        return NodeArray(np.empty(shape, dtype=dtype), writer=True, sharers=1)
    local_rank = os.environ.get("LOCAL_RANK")
    places = _gathered((socket.gethostname(), local_rank))
    host = places[dist.get_rank()][0]
    machine = [rank for other, rank in places if other == host]
    # One writer per machine, found by its local rank: without LOCAL_RANK nothing is shared.
    shares = len(machine) > 1 and machine.count("0") == 1 and None not in machine
    path = _new_shared_file(folder, nbytes, what) if shares and local_rank == "0" else None
    paths = _gathered(path)
    made = next((paths[index] for index, place in enumerate(places) if place == (host, "0")), None)
    array = np.memmap(made, dtype=dtype, mode="r+", shape=shape) if shares and made is not None else None
    # Every process, sharing or not, so that every machine's processes make the same calls.
    dist.barrier()  # every process that maps the file has: it can go
    if path is not None:
        os.unlink(path)
    if array is None:
        return NodeArray(np.empty(shape, dtype=dtype), writer=True, sharers=1)
    return NodeArray(array, writer=local_rank == "0", sharers=len(machine))


def _gathered(value: object) -> list:
    """``value`` of every process of the run, by rank."""
    values: list = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    return values


def _new_shared_file(folder: Path, nbytes: int, what: str) -> str | None:
    """The path of a new file of ``nbytes`` zero bytes in ``folder``, which takes no memory until
    written; ``None``, said at warning, when ``folder`` is missing or has too little room."""
    try:
        room = os.statvfs(folder)
    except OSError:
        logger.warning("%s is not there: each process of this machine keeps its own %s.", folder, what)
        return None
    free = room.f_bavail * room.f_frsize
    if free < nbytes:
        logger.warning(
            "%s has %.2f GiB free and %s needs %.2f GiB: each process of this machine keeps its own "
            "(a container needs a larger --shm-size to share it).",
            folder,
            free / 2**30,
            what,
            nbytes / 2**30,
        )
        return None
    try:
        descriptor, path = tempfile.mkstemp(dir=folder, prefix="metricbert-")
    except OSError as error:
        logger.warning(
            "Cannot create a file in %s (%s): each process of this machine keeps its own %s.",
            folder,
            error,
            what,
        )
        return None
    try:
        os.ftruncate(descriptor, nbytes)
    finally:
        os.close(descriptor)
    return path
