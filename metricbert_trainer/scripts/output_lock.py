"""One run at a time in an output folder, and a folder left as the run found it when it fails early.

Two runs writing checkpoints, rotations and a model card into the same folder interleave them:
``resume_from_checkpoint: last`` may then pick the other run's checkpoint, and each run's rotation
deletes the other's. The first process of a run holds an advisory lock on ``_run.lock`` in the
folder for as long as it runs; a second run is refused at once, naming the process that holds it.
The operating system drops the lock when its process ends, however it ends (a SIGKILL too), so an
interrupted run never leaves a stale lock behind.

The lock is also the mark of a folder a run of this library wrote (``data.output_files``), which
a run told to overwrite clears first. A run that fails before it wrote anything removes the folder
it created, so a mistake leaves no empty folder behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from metricbert_trainer.data.output_files import (
    RUN_LOCK_FILE,
    clear_earlier_run,
    earlier_entries,
    is_earlier_run,
    record_run_end,
    record_run_start,
)
from metricbert_trainer.errors import UsageError


@contextlib.contextmanager
def output_folder_lock(
    output_dir: str | Path,
    holder: bool = True,
    overwrite: bool = False,
    reads: Sequence[str | Path | None] = (),
) -> Iterator[None]:
    """Holds ``output_dir``'s run lock for the ``with`` block; raises ``UsageError`` when another
    run holds it. ``holder=False`` (every process but a launch's first) takes no lock.
    ``overwrite``: clear an earlier run's files once the lock is held (``clear_earlier_run``),
    never one of ``reads``, the files the run reads. The folder's manifest names the entries the
    run did not write, from its start (``record_run_start``) to its end (``record_run_end``)."""
    if not holder:
        yield
        return
    folder = Path(output_dir)
    created, earlier_run = not folder.exists(), is_earlier_run(folder)
    folder.mkdir(parents=True, exist_ok=True)
    handle = open(folder / RUN_LOCK_FILE, "a+", encoding="utf-8")  # noqa: SIM115 - held for the whole block
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            owner = handle.read().strip() or "another process"
            raise UsageError(
                f"output_dir {output_dir} is in use by another run ({owner}); wait for it to finish or "
                "choose another output_dir"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        if overwrite:
            clear_earlier_run(folder, earlier_run=earlier_run, reads=reads)
        started_ns = time.time_ns()
        record_run_start(folder)
        try:
            yield
        except BaseException:
            if created and not earlier_entries(folder):
                shutil.rmtree(folder, ignore_errors=True)
                raise
            record_run_end(folder, started_ns=started_ns)
            raise
        record_run_end(folder, started_ns=started_ns)
    finally:
        handle.close()
