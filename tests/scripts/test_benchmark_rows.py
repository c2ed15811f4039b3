"""The speed benchmark's configurations stay valid recipe settings.

``benchmarks/versus_sentence_transformers.py`` builds each row from a recipe plus overrides; when
an option's rules change (a setting that needs another), a row can stop parsing and the benchmark
dies at that row, after its earlier rows have spent their time (on a GPU lease, its minutes).
"""

import pytest
from conftest import REPO_ROOT, benchmark_module

from metricbert_trainer.metricbert.config import MetricBertConfig
from metricbert_trainer.scripts.arguments import DataArguments, ModelArguments, parse_recipe_args


@pytest.fixture(scope="module")
def versus():
    with benchmark_module("versus_sentence_transformers") as module:
        yield module


def test_every_row_of_the_versus_benchmark_parses_as_it_is_run(versus, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    for label, config, overrides in versus.OURS:
        arguments = ["--config", config, "--output_dir", str(tmp_path), *overrides, *versus.ON_CPU]
        if "bf16" in label:
            arguments += versus.BF16
        _, _, args = parse_recipe_args((ModelArguments, DataArguments, MetricBertConfig), arguments)
        assert args.bf16 == ("bf16" in label), label
        if "without the teacher" in label or "same work" in label:
            assert args.teacher_weight == 0 and args.teacher_shared_neighbours == 0, label


def test_a_profiled_comparison_leaves_steps_to_time(versus, tmp_path):
    """``--profile`` leaves its profiled steps out of the timing: with no step left, the run is
    refused before any model loads rather than ending in an empty median."""
    with pytest.raises(SystemExit, match="pass --steps above that"):
        versus.main(["train", "--steps", str(versus.PROFILED_STEPS), "--profile", str(tmp_path)])
