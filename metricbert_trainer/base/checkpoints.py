"""Checkpoints that are whole or absent: never half-written, never lost to a failed save.

transformers writes ``checkpoint-N`` in place, so a run killed while saving leaves a folder that
``resume_from_checkpoint`` would pick up half-written, and a save that fails after the folder is
created still counts towards ``save_total_limit``. Here a checkpoint is written under
``STAGING_FOLDER`` and moved to ``checkpoint-N`` with one rename once every process has
finished writing it; only then are older checkpoints rotated out. A rename within a file system
is atomic, so ``checkpoint-N`` either holds everything or does not exist.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from transformers.trainer_utils import get_last_checkpoint

logger = logging.getLogger(__name__)

# Beside the checkpoints, under a name that transformers' checkpoint pattern does not match and
# that push_to_hub leaves out (it skips "_*").
STAGING_FOLDER = "_checkpoint-in-progress"
TRAINER_STATE_FILE = "trainer_state.json"
# Values of resume_from_checkpoint that mean "the newest checkpoint in output_dir, if any".
LATEST_CHECKPOINT = ("last", "latest", "true")


def staging_folder(run_dir: str | os.PathLike) -> Path:
    """Where a checkpoint of ``run_dir`` is written before it is published."""
    return Path(run_dir) / STAGING_FOLDER


def discard_staged(run_dir: str | os.PathLike, name: str) -> None:
    """Removes what a failed or killed save left of checkpoint ``name``."""
    shutil.rmtree(staging_folder(run_dir) / name, ignore_errors=True)


def publish_staged(run_dir: str | os.PathLike, name: str) -> Path:
    """Moves the staged checkpoint ``name`` to ``run_dir/name`` in one rename.

    A checkpoint of the same name already there (a run resumed from an earlier checkpoint saves
    the same steps again) is replaced.
    """
    staged, final = staging_folder(run_dir) / name, Path(run_dir) / name
    if final.exists():
        shutil.rmtree(final)
    os.replace(staged, final)
    if not any(staging_folder(run_dir).iterdir()):
        staging_folder(run_dir).rmdir()
    return final


def published_path(path: str | None, run_dir: str | os.PathLike) -> str | None:
    """``path`` with a staged checkpoint's location replaced by where it is published."""
    if path is None:
        return None
    staged = staging_folder(run_dir)
    if Path(path).parent.resolve() != staged.resolve():
        return path
    return str(Path(run_dir) / Path(path).name)


def resumes(value: str | bool | None) -> bool:
    """Whether a ``resume_from_checkpoint`` setting asks to resume (``None``, ``False``, ``""``,
    ``"false"`` and ``"none"`` start afresh)."""
    return not (value is None or value is False or str(value).strip().lower() in ("", "false", "none"))


def checkpoint_to_resume(value: str | bool | None, output_dir: str | os.PathLike) -> str | None:
    """The checkpoint a run resumes from, from a ``resume_from_checkpoint`` setting.

    ``None``/``False``/``""`` start afresh; ``last`` (or ``latest``, ``true``, ``True``) takes the
    newest complete checkpoint in ``output_dir`` and starts afresh, with a warning, when there is
    none, so one command both starts a job and restarts it after a preemption; anything else is
    a checkpoint folder, which must be complete.
    """
    if not resumes(value):
        return None
    if value is True or str(value).strip().lower() in LATEST_CHECKPOINT:
        found = get_last_checkpoint(str(output_dir)) if Path(output_dir).is_dir() else None
        if found is None:
            logger.warning(
                "resume_from_checkpoint=%s: no checkpoint in %s yet; starting afresh.", value, output_dir
            )
        return found
    path = Path(value)
    if not (path / TRAINER_STATE_FILE).is_file():
        raise FileNotFoundError(
            f"resume_from_checkpoint={value}: not a complete checkpoint (no {TRAINER_STATE_FILE} in it). "
            f"Pass a checkpoint-N folder, or 'last' for the newest one in output_dir."
        )
    return str(path)
