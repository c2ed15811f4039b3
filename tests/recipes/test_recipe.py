"""The wines recipe end to end, launched the way users launch it."""

import json
import runpy
import subprocess
import sys

import pytest
from conftest import QUICK_METRICBERT_RUN, REPO_ROOT, accelerate_command, flags
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
            **QUICK_METRICBERT_RUN,
            learning_rate="1e-4",
        ),
    )
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    # Loss terms in the log, a progress bar, and the ranking metrics of the final evaluation.
    assert "'mlm_loss'" in result.stdout + result.stderr and "'triplet_loss'" in result.stdout + result.stderr
    assert "4/4" in result.stderr
    # This package's INFO lines are shown without --log_level: the catalog and the max_length chosen.
    assert "INFO metricbert_trainer.data.catalog: Loaded " in result.stderr
    assert "INFO metricbert_trainer.data.lengths: max_length " in result.stderr
    state = json.loads((output_dir / "checkpoint-4" / "trainer_state.json").read_text())
    logged = [entry for entry in state["log_history"] if "triplet_loss" in entry]
    assert len(logged) == 2
    AutoModelForMaskedLM.from_pretrained(output_dir)
    AutoModel.from_pretrained(output_dir)
    assert "eval_mpr" in result.stdout + result.stderr


def _side_by_side(*commands: list[str]) -> list[subprocess.CompletedProcess]:
    """Runs the commands at once from the repository root: each spends most of its seconds
    importing, one core each."""
    running = [
        (
            command,
            subprocess.Popen(
                command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            ),
        )
        for command in commands
    ]
    results = []
    for command, process in running:
        stdout, stderr = process.communicate(timeout=300)
        results.append(subprocess.CompletedProcess(command, process.returncode, stdout, stderr))
    return results


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ": error: " in line]


@pytest.mark.slow
def test_a_mistake_is_one_line_without_traceback_before_anything_loads(tmp_path):
    """Launched the way users launch it, directly and by `accelerate launch -q`: a NaN learning
    rate and an output folder that is a file are reported together, before the model loads."""
    occupied = tmp_path / "a-file"
    occupied.write_text("x", encoding="utf-8")
    mistakes = ["--learning_rate", "nan", "--output_dir", str(occupied)]
    nan_rate = "train_catalog.py: error: learning_rate must be a finite number; got nan; "
    file_as_folder = f"output_dir {occupied} is a file, not a folder: name another output_dir"
    catalog = ["--catalog", "data/wines/winemag-sample-5811.csv", "--model_name_or_path", "./no-model"]
    launcher = accelerate_command("single_gpu.yaml", "recipes/train_catalog.py", *catalog, *mistakes)
    direct, launched, kept = _side_by_side(
        [sys.executable, "recipes/train_catalog.py", *catalog[:2], *mistakes],
        [*launcher[:3], "-q", *launcher[3:]],
        # --traceback keeps it, for a bug report.
        [sys.executable, "recipes/train_catalog.py", *catalog[:2], *mistakes, "--traceback"],
    )
    assert direct.returncode == 1
    assert _error_lines(direct.stderr) == [nan_rate + file_as_folder] and "Traceback" not in direct.stderr
    assert launched.returncode == 1
    assert _error_lines(launched.stderr) == [
        nan_rate + "model_name_or_path ./no-model does not exist; " + file_as_folder
    ]
    assert "Traceback" not in launched.stderr
    assert kept.returncode == 1 and "Traceback" in kept.stderr and "UsageError" in kept.stderr


@pytest.mark.slow
def test_every_process_of_a_launch_stops_on_a_mistake_and_it_is_said_once(tmp_path):
    """Two processes check the same arguments, both stop (no hang), the first says why."""
    command = accelerate_command(
        "cpu.yaml",
        "recipes/train_catalog.py",
        "--catalog",
        str(tmp_path / "missing.csv"),
        "--output_dir",
        str(tmp_path / "out"),
        processes=2,
    )
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert _error_lines(result.stderr) == [
        f"train_catalog.py: error: catalog file not found: {tmp_path / 'missing.csv'}"
    ]


# The README's commands and the one training script per method they run, with the config each
# command defaults to.
ALIASES = {
    "recipes/train_wines.py": ("recipes/metricbert/train.py", "recipes/wines/minilm.yaml"),
    "recipes/train_video_games.py": ("recipes/metricbert/train.py", "recipes/video_games/minilm.yaml"),
    "recipes/train_catalog.py": ("recipes/metricbert/train.py", "recipes/catalog/minilm.yaml"),
    "recipes/train_recobert_wines.py": ("recipes/recobert/train.py", "recipes/wines/recobert.yaml"),
}


def _options_help(capsys, monkeypatch, script: str, *arguments: str) -> str:
    """``python script *arguments --help`` run in this process (``runpy``, as ``python`` runs a
    script: the same parser, without importing transformers anew for each of the eight commands),
    below the usage paragraph (which names the script): every option and its default."""
    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.setattr(sys, "argv", [script, *arguments, "--help"])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(script, run_name="__main__")
    assert exit_.value.code in (0, None)
    return capsys.readouterr().out.split("\n\n", 1)[1]


@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_readme_commands_run_the_methods_script_with_their_data_sets_config(alias, capsys, monkeypatch):
    script, config = ALIASES[alias]
    alias_help = _options_help(capsys, monkeypatch, alias)
    script_help = _options_help(capsys, monkeypatch, script, "--config", config)
    assert alias_help == script_help
