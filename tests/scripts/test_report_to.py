"""``report_to: tensorboard`` and ``wandb`` (offline): what a recipe run logs lands in their files.

Each integration reads the trainer's logs through its own callback; these tests read back what
it wrote (TensorBoard's event files, W&B's offline run file), not what the trainer meant to send.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from conftest import QUICK_METRICBERT_RUN, REPO_ROOT, WINES_ANNOTATIONS, WINES_CSV, flags

from metricbert_trainer.scripts.train import main as recipe_main

# Every loss term and statistic the run's objective logs (MLM, triplet, distillation and the
# guide's diagnostic) and the ranking metrics of its evaluations.
LOSS_TERMS = ("loss", "mlm_loss", "triplet_loss", "distill_loss", "guide_negative_closer_rate")
RANKING_METRICS = ("eval_mpr", "eval_mrr", "eval_hr@10", "eval_hr@100", "eval_raw_mpr")


@pytest.fixture(scope="module")
def reported_run(tiny_model_path, tmp_path_factory):
    """One recipe run reporting to both integrations (W&B offline, in a folder of its own; to
    TensorBoard alone where wandb is not installed), and that folder; each test reads back one
    integration's files."""
    try:
        import wandb
    except ImportError:
        wandb = None
    folder = tmp_path_factory.mktemp("report-to")
    options = QUICK_METRICBERT_RUN | {"logging_steps": 1, "eval_strategy": "steps", "eval_steps": 2}
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("WANDB_MODE", "offline")
        environment.setenv("WANDB_DIR", str(folder))
        environment.setenv("WANDB_SILENT", "true")
        environment.setenv("WANDB_PROJECT", "metricbert-test")
        run = recipe_main(
            flags(
                model_name_or_path=tiny_model_path,
                catalog=WINES_CSV,
                annotations=WINES_ANNOTATIONS,
                output_dir=folder / "run",
                mlm_weight=1.0,
                mlm_probability=0.15,
                plot_column="",
                **options,
            )
            + ["--report_to", "tensorboard", *(["wandb"] if wandb else [])],
            default_config=REPO_ROOT / "recipes" / "wines" / "minilm.yaml",
        )
        if wandb is not None:
            wandb.finish()
            # finish() returns once the service has the run's last records, not once wandb-core has
            # flushed them to the run file (a CI run read a file that held no history yet): teardown()
            # waits for the service to exit, which closes the file.
            wandb.teardown()
    return run, folder


def _assert_holds_every_term_and_metric(series: dict[str, list], run) -> None:
    """``series`` (an integration's values by tag, as it wrote them) holds every loss term at each
    logged step and every ranking metric, the last MPR the run's own, and each of them is a name
    the trainer itself logged."""
    for name in LOSS_TERMS:
        assert f"train/{name}" in series, (name, sorted(series))
        assert len(series[f"train/{name}"]) == 4  # one value per logged step
    for name in RANKING_METRICS:
        assert f"eval/{name.removeprefix('eval_')}" in series, (name, sorted(series))
    assert float(series["eval/mpr"][-1]) == pytest.approx(run.metrics["eval_mpr"], abs=1e-4)
    logged = {name for entry in run.trainer.state.log_history for name in entry}
    assert set(LOSS_TERMS) | set(RANKING_METRICS) <= logged


@pytest.mark.slow
def test_tensorboard_event_files_hold_every_loss_term_and_ranking_metric(reported_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run, folder = reported_run
    event_files = list((folder / "run").rglob("events.out.tfevents.*"))
    assert event_files
    tags: dict[str, list[float]] = {}
    for path in event_files:
        events = EventAccumulator(str(path))
        events.Reload()
        for tag in events.Tags()["scalars"]:
            tags.setdefault(tag, []).extend(event.value for event in events.Scalars(tag))
    _assert_holds_every_term_and_metric(tags, run)


@pytest.mark.slow
def test_wandb_offline_run_holds_every_loss_term_and_ranking_metric(reported_run):
    pytest.importorskip("wandb")
    run, folder = reported_run
    (run_file,) = folder.rglob("run-*.wandb")
    history, record_types = _wandb_records(run_file)
    assert "exit" in record_types, sorted(record_types)  # the whole run reached the file
    _assert_holds_every_term_and_metric(history, run)


# W&B's run file is a LevelDB-style log (wandb-core writes it; the Python package no longer ships
# a reader): a 7-byte file header, then 32 KiB blocks of records, each with a 7-byte header
# (CRC, length, kind) and split across blocks as FIRST, MIDDLE..., LAST, or whole (FULL).
_WANDB_FILE_HEADER = 7
_WANDB_BLOCK = 32 * 1024
_WANDB_RECORD_HEADER = 7
_FULL, _LAST = 1, 4


def _wandb_records(path: Path) -> tuple[dict[str, list[str]], set[str]]:
    """Every value each history key received in an offline run file, in order (JSON text), and
    the kinds of record the file holds."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    position, pending, history, record_types = _WANDB_FILE_HEADER, b"", {}, set()
    while position + _WANDB_RECORD_HEADER <= len(data):
        left_in_block = _WANDB_BLOCK - position % _WANDB_BLOCK
        _, length, kind = struct.unpack("<IHB", data[position : position + _WANDB_RECORD_HEADER])
        if left_in_block < _WANDB_RECORD_HEADER or (length == 0 and kind == 0):
            position += left_in_block  # the block's zero padding
            continue
        start = position + _WANDB_RECORD_HEADER
        pending += data[start : start + length]
        position = start + length
        if kind not in (_FULL, _LAST):
            continue
        record = wandb_internal_pb2.Record()
        record.ParseFromString(pending)
        pending = b""
        record_types.add(record.WhichOneof("record_type"))
        if record.WhichOneof("record_type") == "history":
            for item in record.history.item:
                history.setdefault(item.key or "/".join(item.nested_key), []).append(item.value_json)
    return history, record_types
