"""The wines recipe end to end, launched the way users launch it."""

import json
import subprocess

import pytest
from conftest import QUICK_RUN, REPO_ROOT, accelerate_command, flags
from transformers import AutoModel, AutoModelForMaskedLM


@pytest.mark.slow
def test_accelerate_launch_trains_evaluates_and_saves(tmp_path, tiny_model_path):
    output_dir = tmp_path / "run"
    command = accelerate_command(
        "single_gpu.yaml",
        "recipes/train_wines.py",
        *flags(
            model_name_or_path=tiny_model_path,
            output_dir=output_dir,
            **QUICK_RUN,
            learning_rate="1e-4",
        ),
    )
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


# The README's commands and the one training script per method they run, with the config each
# command defaults to.
ALIASES = {
    "recipes/train_wines.py": ("recipes/metricbert/train.py", "recipes/wines/minilm.yaml"),
    "recipes/train_video_games.py": ("recipes/metricbert/train.py", "recipes/video_games/minilm.yaml"),
    "recipes/train_catalog.py": ("recipes/metricbert/train.py", "recipes/catalog/minilm.yaml"),
    "recipes/train_recobert_wines.py": ("recipes/recobert/train.py", "recipes/wines/recobert.yaml"),
}


def _options_help(*command: str) -> str:
    """``--help`` below the usage paragraph (which names the script): every option and its default."""
    result = subprocess.run(
        ["python", *command, "--help"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.split("\n\n", 1)[1]


@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_readme_commands_run_the_methods_script_with_their_data_sets_config(alias):
    script, config = ALIASES[alias]
    assert _options_help(alias) == _options_help(script, "--config", config)
