"""Everything a recipe can check before it loads anything, and the one-run-per-folder lock."""

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import REPO_ROOT

from metricbert_trainer.data.output_files import RUN_LOCK_FILE
from metricbert_trainer.errors import UsageError, report_usage_errors
from metricbert_trainer.metricbert.config import MetricBertConfig
from metricbert_trainer.scripts.arguments import DataArguments, ModelArguments, parse_recipe_args
from metricbert_trainer.scripts.output_lock import output_folder_lock
from metricbert_trainer.scripts.preflight import check_recipe_arguments

TYPES = (ModelArguments, DataArguments, MetricBertConfig)


@pytest.fixture
def files(tmp_path, tiny_model_path, wines_csv, wines_annotations):
    """Flags of a recipe whose every path is valid."""
    return [
        "--model_name_or_path",
        tiny_model_path,
        "--catalog",
        str(wines_csv),
        "--annotations",
        str(wines_annotations),
        "--output_dir",
        str(tmp_path / "out"),
    ]


def _check(flags):
    check_recipe_arguments(*parse_recipe_args(TYPES, flags))


def test_valid_arguments_pass(files):
    _check(files)


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--learning_rate", "nan", "learning_rate must be a finite number; got nan"),
        ("--learning_rate", "0", "learning_rate must be > 0.0; got 0.0"),
        ("--learning_rate", "-0.5", "learning_rate must be > 0.0; got -0.5"),
        ("--weight_decay", "inf", "weight_decay must be a finite number; got inf"),
        ("--adam_beta2", "1", "adam_beta2 must be >= 0.0 and < 1.0; got 1.0"),
        ("--max_grad_norm", "-1", "max_grad_norm must be >= 0.0"),
        ("--num_train_epochs", "0", "num_train_epochs must be > 0 (or max_steps > 0)"),
        ("--max_steps", "0", "max_steps must be > 0 to cap the run, or -1 (the default) to train"),
        ("--per_device_train_batch_size", "0", "per_device_train_batch_size must be >= 1; got 0"),
        ("--max_steps", "-5", "max_steps must be > 0 to cap the run, or -1 (the default) to train"),
        ("--seed", "-3", "seed must be >= 0 and < 4294967296; got -3"),
        ("--logging_steps", "-2", "logging_steps must be > 0.0; got -2"),
        ("--margin", "nan", "margin must be a finite number; got nan"),
        ("--distill_weight", "inf", "distill_weight must be a finite number"),
    ],
)
def test_numbers_out_of_range_are_refused_before_anything_loads(files, flag, value, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _check([*files, flag, value])


def test_epochs_may_be_zero_when_steps_are_given(files):
    _check([*files, "--num_train_epochs", "0", "--max_steps", "3"])


def test_missing_and_wrong_kind_of_files(tmp_path, files):
    with pytest.raises(UsageError, match="catalog file not found: .*nowhere.csv"):
        _check([*files, "--catalog", str(tmp_path / "nowhere.csv")])
    with pytest.raises(UsageError, match="annotations must be a file; .* is a folder"):
        _check([*files, "--annotations", str(tmp_path)])
    with pytest.raises(UsageError, match="is not a model folder \\(no config.json in it\\)"):
        _check([*files, "--model_name_or_path", str(tmp_path)])
    with pytest.raises(UsageError, match="model_name_or_path ./no-such-model does not exist"):
        _check([*files, "--model_name_or_path", "./no-such-model"])


def test_every_problem_is_named_in_one_message(tmp_path, files):
    with pytest.raises(UsageError) as raised:
        _check([*files, "--catalog", str(tmp_path / "gone.csv"), "--learning_rate", "nan"])
    assert "learning_rate must be a finite number" in str(raised.value)
    assert "catalog file not found" in str(raised.value)


def test_output_folder_must_be_a_writable_folder(tmp_path, files):
    occupied = tmp_path / "a-file"
    occupied.write_text("x", encoding="utf-8")
    with pytest.raises(UsageError, match="output_dir .*a-file is a file, not a folder"):
        _check([*files, "--output_dir", str(occupied)])
    with pytest.raises(UsageError, match="cannot be created: .*a-file is a file"):
        _check([*files, "--output_dir", str(occupied / "run")])
    _check([*files, "--output_dir", str(tmp_path / "new" / "deep" / "run")])
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(UsageError, match="is not writable"):
            _check([*files, "--output_dir", str(locked / "run")])


def test_a_named_checkpoint_must_be_complete(tmp_path, files):
    with pytest.raises(
        UsageError, match="checkpoint-9 is not a complete checkpoint folder \\(no trainer_state.json"
    ):
        _check([*files, "--resume_from_checkpoint", str(tmp_path / "checkpoint-9")])
    _check([*files, "--resume_from_checkpoint", "last"])


def test_evaluation_needs_something_to_rank_and_a_logged_metric(files):
    without_annotations = [*files, "--annotations", "", "--selection_holdout", "0"]
    with pytest.raises(
        UsageError, match="evaluation .* ranks the catalog: give annotations, or selection_holdout"
    ):
        _check([*without_annotations, "--eval_strategy", "steps", "--eval_steps", "5"])
    # The label-free signals alone are something to evaluate and select on.
    _check([*files, "--annotations", "", "--eval_on_start", "true", "--metric_for_best_model", "lf_t2d_mrr"])
    with pytest.raises(
        UsageError,
        match="metric_for_best_model 'mrrr' is not among the logged metrics; choose one of mpr, mrr",
    ):
        _check([*files, "--metric_for_best_model", "eval_mrrr"])
    # load_best_model_at_end alone would select on an evaluation loss that ranking never logs.
    best = ["--eval_strategy", "steps", "--save_strategy", "steps", "--load_best_model_at_end", "true"]
    with pytest.raises(UsageError, match="metric_for_best_model 'loss' is not among the logged metrics"):
        _check([*files, *best])
    _check([*files, *best, "--metric_for_best_model", "map"])


def test_publishing_needs_the_network_a_token_and_the_reporting_packages(files, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UsageError, match="push_to_hub needs the network, but HF_HUB_OFFLINE is set"):
        _check([*files, "--push_to_hub", "true", "--hub_model_id", "someone/model"])
    _check([*files, "--report_to", "tensorboard"])  # a requirement of the project
    if importlib.util.find_spec("wandb") is None:
        with pytest.raises(UsageError, match="report_to wandb needs its package: pip install wandb"):
            _check([*files, "--report_to", "wandb"])


def test_config_values_of_the_wrong_shape(tmp_path, files):
    config = tmp_path / "recipe.yaml"
    config.write_text("learning_rate: [1.0e-5, 2.0e-5]\n", encoding="utf-8")
    with pytest.raises(UsageError, match="learning_rate takes one value; got \\[1e-05, 2e-05\\]"):
        _check([*files, "--config", str(config)])
    config.write_text("learning_rate: [1\n", encoding="utf-8")
    with pytest.raises(UsageError, match="the recipe config is not valid YAML"):
        _check([*files, "--config", str(config)])
    with pytest.raises(UsageError, match="recipe config .* is a folder, not a YAML file"):
        _check([*files, "--config", str(tmp_path)])
    with pytest.raises(UsageError, match="max_train_items must be at least 2"):
        _check([*files, "--max_train_items", "1"])


def test_one_run_at_a_time_per_output_folder(tmp_path):
    """A second run, here another process, is refused while the first holds the folder; the lock
    goes with the process that held it."""
    holder = textwrap.dedent(
        f"""
        import sys, time
        from metricbert_trainer.scripts.output_lock import output_folder_lock
        with output_folder_lock({str(tmp_path)!r}):
            print("held", flush=True)
            sys.stdin.readline()
        """
    )
    first = subprocess.Popen(
        [sys.executable, "-c", holder],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
    )
    try:
        assert first.stdout.readline().strip() == "held"
        with pytest.raises(UsageError, match=f"is in use by another run \\(pid {first.pid}\\)"):
            with output_folder_lock(tmp_path):
                pass
        with output_folder_lock(tmp_path, holder=False):
            pass  # the other processes of a launch take no lock
    finally:
        first.kill()
        first.wait()
    with output_folder_lock(tmp_path):  # a killed holder leaves no stale lock
        assert (tmp_path / RUN_LOCK_FILE).read_text(encoding="utf-8") == f"pid {os.getpid()}"


def test_usage_errors_print_one_line_and_exit_non_zero(capsys, monkeypatch):
    def main(argv):
        raise UsageError(f"bad option in {argv}")

    monkeypatch.delenv("METRICBERT_TRACEBACK", raising=False)
    with pytest.raises(SystemExit) as exit_:
        report_usage_errors(main, ["--x"], prog="train.py")
    assert exit_.value.code == 1
    assert capsys.readouterr().err == "train.py: error: bad option in ['--x']\n"
    with pytest.raises(UsageError):  # --traceback lets it through, and is not passed on
        report_usage_errors(main, ["--x", "--traceback"], prog="train.py")
    with pytest.raises(KeyError):  # a bug is no usage error: its traceback stays

        def buggy(argv):
            raise KeyError("bug")

        report_usage_errors(buggy, [], prog="train.py")


def test_a_value_of_the_wrong_type_is_reported_in_two_lines(files, capsys):
    """Issue #90: `--max_steps 2.5` printed the usage of every option (180 lines) before its error."""
    with pytest.raises(SystemExit):
        parse_recipe_args(TYPES, [*files, "--max_steps", "2.5"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and "(--help lists every option)" in lines[0]
    assert "invalid int value: '2.5'" in lines[1] and "--max_steps" in lines[1]
