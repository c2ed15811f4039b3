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

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint, rotate_checkpoints

from metricbert_trainer.base.modeling import masked_lm_location

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


class StagedCheckpoints:
    """The checkpointing a ``Trainer`` subclass gets by deriving from this first: checkpoints
    staged and published by one rename, ``resume_from_checkpoint="last"``, and weights read from
    the ``masked_lm/`` subfolder of the saved layout (``publishing.saved_layout``).

    Each override below is one transformers gives no public hook for; the line above it says why.
    """

    def train(self, resume_from_checkpoint: str | bool | None = None, trial=None, **kwargs):
        """``Trainer.train``; ``resume_from_checkpoint="last"`` resumes from the newest complete
        checkpoint in ``output_dir`` when there is one (``checkpoint_to_resume``)."""
        checkpoint = checkpoint_to_resume(resume_from_checkpoint, self.args.output_dir)
        if checkpoint is not None and self.is_deepspeed_enabled and not self.args.allow_pickled_checkpoints:
            raise ValueError(
                f"Resuming the DeepSpeed checkpoint {checkpoint} unpickles its optimizer files, and a pickle can run "
                "any code. Set allow_pickled_checkpoints (--allow_pickled_checkpoints) if you wrote it yourself."
            )
        return super().train(resume_from_checkpoint=checkpoint, trial=trial, **kwargs)

    def _weights_folder(self, checkpoint: str) -> str:
        """Where transformers reads a checkpoint's model weights from: its ``masked_lm/`` subfolder,
        except for DeepSpeed and FSDP, which read their own files at the top."""
        if self.is_deepspeed_enabled or self.is_fsdp_enabled:
            return checkpoint
        return masked_lm_location(checkpoint)

    # Override: transformers reads the weights at the checkpoint's top; the layout keeps them in masked_lm/.
    def _load_from_checkpoint(self, resume_from_checkpoint: str, model=None) -> None:
        super()._load_from_checkpoint(self._weights_folder(resume_from_checkpoint), model)

    # Override: the same for the best checkpoint loaded at the end (load_best_model_at_end).
    def _load_best_model(self) -> None:
        best = self.state.best_model_checkpoint
        self.state.best_model_checkpoint = self._weights_folder(best)
        try:
            super()._load_best_model()
        finally:
            self.state.best_model_checkpoint = best

    # Override: while a checkpoint is saved, transformers' run folder is the staging folder.
    def _get_output_dir(self, trial) -> str:
        run_dir = super()._get_output_dir(trial)
        return str(staging_folder(run_dir)) if getattr(self, "_staging_checkpoint", False) else run_dir

    # Override: transformers writes checkpoint-N in place; here it is staged, then published whole.
    def _save_checkpoint(self, model, trial) -> None:
        run_dir = self._get_output_dir(trial)
        name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        if self.args.should_save:
            discard_staged(run_dir, name)
        self.accelerator.wait_for_everyone()
        self._staging_checkpoint = True
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self._staging_checkpoint = False
        self.accelerator.wait_for_everyone()
        # transformers recorded the best checkpoint where it was written; it is read where it is published.
        best = published_path(self.state.best_model_checkpoint, run_dir)
        recorded_staged = best != self.state.best_model_checkpoint
        self.state.best_model_checkpoint = best
        if self.args.should_save:
            if recorded_staged:
                self.state.save_to_json(str(staging_folder(run_dir) / name / TRAINER_STATE_FILE))
            publish_staged(run_dir, name)
            rotate_checkpoints(
                output_dir=run_dir,
                save_total_limit=self.args.save_total_limit,
                best_model_checkpoint=best,
                use_mtime=True,
            )
        self.accelerator.wait_for_everyone()
