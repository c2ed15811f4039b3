"""One run at a time in an output folder.

Two runs writing checkpoints, rotations and a model card into the same folder interleave them:
``resume_from_checkpoint: last`` may then pick the other run's checkpoint, and each run's rotation
deletes the other's. The first process of a run holds an advisory lock on ``_run.lock`` in the
folder for as long as it runs; a second run is refused at once, naming the process that holds it.
The operating system drops the lock when its process ends, however it ends (a SIGKILL too), so an
interrupted run never leaves a stale lock behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from metricbert_trainer.errors import UsageError

# Leading underscore: transformers leaves "_*" out of what it uploads to the Hub.
LOCK_FILE = "_run.lock"


@contextlib.contextmanager
def output_folder_lock(output_dir: str | Path, holder: bool = True) -> Iterator[None]:
    """Holds ``output_dir``'s run lock for the ``with`` block; raises ``UsageError`` when another
    run holds it. ``holder=False`` (every process but a launch's first) takes no lock."""
    if not holder:
        yield
        return
    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    handle = open(folder / LOCK_FILE, "a+", encoding="utf-8")  # noqa: SIM115 - held for the whole block
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
        yield
    finally:
        handle.close()
