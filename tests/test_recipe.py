"""The wines recipe end to end, launched the way users launch it."""

import json
import subprocess
import sys

import pytest
from conftest import REPO_ROOT
from transformers import AutoModel, AutoModelForMaskedLM


@pytest.mark.slow
def test_accelerate_launch_trains_evaluates_and_saves(tmp_path, tiny_model_path):
    output_dir = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        "accelerate_configs/single_gpu.yaml",
        "--mixed_precision",
        "no",
        "recipes/train_wines.py",
        "--model_name_or_path",
        tiny_model_path,
        "--output_dir",
        str(output_dir),
        "--max_train_items",
        "64",
        "--max_steps",
        "4",
        "--logging_steps",
        "2",
        "--per_device_train_batch_size",
        "16",
        "--learning_rate",
        "1e-4",
    ]
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    # Loss terms in the log, a progress bar, and the ranking metrics of the final evaluation.
    assert "'mlm_loss'" in result.stdout + result.stderr and "'triplet_loss'" in result.stdout + result.stderr
    assert "4/4" in result.stderr
    state = json.loads((output_dir / "checkpoint-4" / "trainer_state.json").read_text())
    logged = [entry for entry in state["log_history"] if "triplet_loss" in entry]
    assert len(logged) == 2
    AutoModelForMaskedLM.from_pretrained(output_dir)
    AutoModel.from_pretrained(output_dir)
    assert "eval_mpr" in result.stdout + result.stderr
