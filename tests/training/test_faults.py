"""Faults lose nothing: a killed run resumes to the model an uninterrupted run ends with, a
checkpoint is never seen half-written, a failed save keeps the previous checkpoint, and a
non-finite loss stops the run (naming the step) or is skipped and counted.

The kill and save faults run ``tests/training/faults/interrupted_training.py`` in its own process, so
SIGKILL is a real one.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import tiny_metricbert_trainer
from safetensors.torch import load_file
from transformers import AutoTokenizer

from metricbert_trainer.base.checkpoints import STAGING_FOLDER, checkpoint_to_resume
from metricbert_trainer.base.modeling import load_masked_lm
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.metricbert.trainer import MetricBertTrainer
from metricbert_trainer.training.trainer import NonFiniteLossError

INTERRUPTED_TRAINING = Path(__file__).parent / "faults" / "interrupted_training.py"
CHECKPOINT_FILES = (
    "model.safetensors",
    "optimizer.pt",
    "scheduler.pt",
    "rng_state.pth",
    "trainer_state.json",
)


def _train(model_path: str, output_dir: Path, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(INTERRUPTED_TRAINING), model_path, str(output_dir), *options],
        capture_output=True,
        text=True,
        timeout=600,
    )


def _checkpoints(output_dir: Path) -> list[str]:
    return sorted(path.name for path in output_dir.glob("checkpoint-*"))


def _logged_losses(checkpoint: Path) -> dict[int, float]:
    state = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
    return {entry["step"]: entry["loss"] for entry in state["log_history"] if "loss" in entry}


def _assert_same_training(resumed: Path, uninterrupted: Path) -> None:
    reference, weights = (
        load_file(uninterrupted / "model.safetensors"),
        load_file(resumed / "model.safetensors"),
    )
    assert weights.keys() == reference.keys()
    difference = max(float((weights[name] - reference[name]).abs().max()) for name in reference)
    assert difference <= 1e-6
    # Same data order, masks, dropout, optimizer and schedule: the same loss at every step.
    assert _logged_losses(resumed / "checkpoint-8") == pytest.approx(
        _logged_losses(uninterrupted / "checkpoint-8"), abs=1e-6
    )


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, tiny_model_path) -> Path:
    output_dir = tmp_path_factory.mktemp("uninterrupted")
    run = _train(tiny_model_path, output_dir)
    assert run.returncode == 0, run.stderr[-3000:]
    return output_dir


@pytest.mark.slow
def test_sigkill_resumes_with_the_same_steps_data_masks_and_optimizer(
    uninterrupted, tiny_model_path, tmp_path
):
    killed = _train(tiny_model_path, tmp_path, "--kill-after-step", "5")
    assert killed.returncode == -signal.SIGKILL
    assert _checkpoints(tmp_path) == ["checkpoint-2", "checkpoint-4"]

    resumed = _train(tiny_model_path, tmp_path, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "starting at step 4" in resumed.stdout
    _assert_same_training(tmp_path, uninterrupted)


@pytest.mark.slow
def test_a_checkpoint_killed_while_saving_is_never_picked_up(uninterrupted, tiny_model_path, tmp_path):
    killed = _train(tiny_model_path, tmp_path, "--kill-while-saving", "6")
    assert killed.returncode == -signal.SIGKILL
    # The half-written checkpoint stayed in the staging folder; the published ones are whole.
    assert _checkpoints(tmp_path) == ["checkpoint-2", "checkpoint-4"]
    assert (tmp_path / STAGING_FOLDER / "checkpoint-6").is_dir()
    for name in _checkpoints(tmp_path):
        assert all((tmp_path / name / file).is_file() for file in CHECKPOINT_FILES)
        load_file(tmp_path / name / "model.safetensors")
    assert checkpoint_to_resume("last", tmp_path) == str(tmp_path / "checkpoint-4")

    resumed = _train(tiny_model_path, tmp_path, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "starting at step 4" in resumed.stdout
    assert not (tmp_path / STAGING_FOLDER / "checkpoint-6").exists()
    _assert_same_training(tmp_path, uninterrupted)


@pytest.mark.slow
def test_a_failed_save_keeps_the_previous_checkpoints(uninterrupted, tiny_model_path, tmp_path):
    failed = _train(tiny_model_path, tmp_path, "--fail-saving", "6")
    assert failed.returncode == 1
    assert "No space left on device" in failed.stderr
    # Rotation (save_total_limit=2) runs only after a save succeeds, so nothing was deleted.
    assert _checkpoints(tmp_path) == ["checkpoint-2", "checkpoint-4"]

    resumed = _train(tiny_model_path, tmp_path, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "starting at step 4" in resumed.stdout
    assert _checkpoints(tmp_path) == ["checkpoint-6", "checkpoint-8"]
    _assert_same_training(tmp_path, uninterrupted)


def test_resume_setting_names_what_is_wrong(tmp_path, caplog):
    caplog.set_level("WARNING", logger="metricbert_trainer")
    assert checkpoint_to_resume(None, tmp_path) is None
    assert checkpoint_to_resume("last", tmp_path / "never-trained") is None
    assert "starting afresh" in caplog.text
    (tmp_path / "checkpoint-3").mkdir()
    with pytest.raises(FileNotFoundError, match="not a complete checkpoint"):
        checkpoint_to_resume(str(tmp_path / "checkpoint-3"), tmp_path)


@pytest.fixture
def poisoned_training(tmp_path, tiny_model_path, wines_csv):
    """A trainer whose model turns one item's texts into NaN embeddings: the word embedding of a
    word piece that only that item contains is NaN, as after an overflow in an earlier run."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    items = load_catalog(wines_csv).dataset.select(range(8))
    ids = [set(tokenizer(item["title"] + " " + item["description"])["input_ids"]) for item in items]
    unique = sorted(ids[5] - set().union(*ids[:5], *ids[6:]))
    model = load_masked_lm(tiny_model_path)
    with torch.no_grad():
        model.get_input_embeddings().weight[unique[0]] = float("nan")

    def build(nonfinite_loss: str) -> MetricBertTrainer:
        return tiny_metricbert_trainer(
            tmp_path / nonfinite_loss,
            model,
            tokenizer,
            items,
            per_device_train_batch_size=4,
            max_steps=-1,
            num_train_epochs=2,
            max_length=None,
            nonfinite_loss=nonfinite_loss,
        )

    return build, unique[0]


def test_a_nonfinite_loss_stops_training_naming_the_step(poisoned_training):
    build, _ = poisoned_training
    trainer = build("stop")
    # save_strategy "no": the message claims no checkpoint that does not exist.
    with pytest.raises(
        NonFiniteLossError, match=r"training step [12]\b.*No checkpoint was saved in .* before it"
    ):
        trainer.train()


def test_a_nonfinite_loss_is_skipped_and_counted(poisoned_training):
    build, poisoned_row = poisoned_training
    trainer = build("skip")
    before = {name: tensor.clone() for name, tensor in trainer.model.named_parameters()}
    trainer.train()
    # One of the two batches of each epoch holds the poisoned item: 2 of 4 steps are skipped.
    assert trainer.nonfinite_losses_skipped == 2
    assert trainer.state.log_history[-1]["nonfinite_losses_skipped"] == 2
    for name, tensor in trainer.model.named_parameters():
        finite = tensor.detach().clone()
        if name.endswith("word_embeddings.weight"):
            finite[poisoned_row] = 0
        assert torch.isfinite(finite).all(), name
    assert any(not torch.equal(before[name], tensor) for name, tensor in trainer.model.named_parameters())
