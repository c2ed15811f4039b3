"""Settings that cannot train the configured objective are refused before the model loads, and a
catalog whose texts give the pairs nothing to learn is warned about with counts (issue #38,
family 2). Real recipes, the tiny model, real files."""

from __future__ import annotations

import logging

import pandas as pd
import pytest
from conftest import QUICK_RUN, REPO_ROOT, flags

from metricbert_trainer.errors import UsageError
from metricbert_trainer.ner.config import NerConfig
from metricbert_trainer.scripts.train import main as train_recipe

WINE_TAGS = REPO_ROOT / "data" / "wines_ner" / "wine-titles-ner.jsonl"


def _recipe(model: str, catalog, output_dir, **options) -> list[str]:
    settings = {
        "model_name_or_path": model,
        "catalog": catalog,
        "annotations": "",
        "output_dir": output_dir,
        "save_strategy": "no",
        "mlm_head_warmup_steps": 0,
        "warmup_steps": 0,  # a run of a step or two has no schedule to warm up
        "report_to": "none",
        "disable_tqdm": "true",
        **QUICK_RUN,
        "max_train_items": 32,
        "max_steps": 2,
    }
    return flags(**(settings | options))


def test_a_batch_of_one_is_refused_for_every_term_that_needs_negatives(files, tiny_model_path, tmp_path):
    catalog = files / "wines.csv"
    # Batches drawn at random: a neighbourhood of the recipe's 8 items cannot fit in a batch of one.
    one_item_batches = {"per_device_train_batch_size": 1, "batch_neighbourhood_size": 0}
    two_items = {"per_device_train_batch_size": 2, "teacher_weight": 1}
    with pytest.raises(
        UsageError, match="per_device_train_batch_size 1 leaves the triplet_weight term nothing"
    ):
        train_recipe(_recipe(tiny_model_path, catalog, tmp_path / "a", **one_item_batches))
    tagged = ["--model_name_or_path", tiny_model_path, "--tagged_catalog", str(WINE_TAGS)]
    with pytest.raises(UsageError, match="leaves the metric_weight term nothing to train"):
        train_recipe(
            [*tagged, "--output_dir", str(tmp_path / "b"), "--per_device_train_batch_size", "1"],
            default_config=REPO_ROOT / "recipes" / "wines" / "ner.yaml",
            config_class=NerConfig,
        )
    # The teacher ranks each item's other batch items: a batch of 2 leaves it one, nothing to order.
    with pytest.raises(
        UsageError, match="per_device_train_batch_size 2 leaves the teacher_weight term"
    ) as refused:
        train_recipe(_recipe(tiny_model_path, catalog, tmp_path / "d", **one_item_batches | two_items))
    assert "triplet_weight" not in str(refused.value)
    assert not any((tmp_path / name).exists() for name in "abd")
    # Without the in-batch term a batch of one trains: the MLM term alone.
    run = train_recipe(
        _recipe(
            tiny_model_path, catalog, tmp_path / "c", **one_item_batches, triplet_weight=0, teacher_weight=0
        )
    )
    assert run.trainer.state.global_step == 2


def test_a_run_with_every_loss_term_off_is_refused(files, tmp_path):
    off = {"triplet_weight": 0, "mlm_weight": 0, "distill_weight": 0, "teacher_weight": 0}
    # A model path that does not exist: the settings are refused before anything would load it.
    with pytest.raises(UsageError, match="every loss term is off .*the run would train nothing"):
        train_recipe(_recipe(str(tmp_path / "no-model"), files / "wines.csv", tmp_path / "run", **off))


def test_a_schedule_with_learning_rate_0_at_every_step_is_refused(files, tiny_model_path, tmp_path):
    catalog = files / "wines.csv"
    epochs = {"max_steps": -1, "num_train_epochs": 0.001, "warmup_steps": 0.1}
    with pytest.raises(UsageError, match="1 optimizer step.*gives every one of them learning rate 0"):
        train_recipe(_recipe(tiny_model_path, catalog, tmp_path / "a", **epochs))
    assert not (tmp_path / "a").exists()
    # The same schedule without the warm-up trains its one step at the full rate.
    run = train_recipe(_recipe(tiny_model_path, catalog, tmp_path / "b", **{**epochs, "warmup_steps": 0}))
    assert run.trainer.state.global_step == 1


def test_a_catalog_too_small_to_hold_items_out_is_refused_when_nothing_else_evaluates(
    files, tiny_model_path, tmp_path
):
    """Issue #90: 40 items, no annotations, evaluation on: the label-free hold-out came out empty
    and transformers failed after the model load and warm-up ("evaluation requires an
    eval_dataset"). Refused once the catalog is read, before the model loads; no folder is left."""
    catalog = files / "wines.csv"
    small = tmp_path / "forty.csv"
    pd.read_csv(catalog, dtype=str).head(40).to_csv(small, index=False)
    with pytest.raises(UsageError, match="40 items are too few to hold out any .*give --annotations"):
        train_recipe(_recipe(tiny_model_path, small, tmp_path / "a", eval_on_start="true"))
    assert not (tmp_path / "a").exists()


def test_a_degenerate_catalog_is_warned_about_with_counts(files, tiny_model_path, tmp_path, caplog):
    frame = pd.read_csv(files / "wines.csv", dtype=str).head(32)
    frame.loc[:9, "description"] = frame.loc[:9, "title"]  # 10 items: title == description
    frame.loc[10:15, "description"] = "A fine wine."  # 6 items share one description
    catalog = tmp_path / "degenerate.csv"
    frame.to_csv(catalog, index=False)
    with caplog.at_level(logging.WARNING, logger="metricbert_trainer"):
        train_recipe(_recipe(tiny_model_path, catalog, tmp_path / "run", max_steps=1))
    warnings = [
        record.getMessage() for record in caplog.records if "The training catalog:" in record.getMessage()
    ]
    assert any(
        "10 of 32 items have one text in every field (title, description)" in line for line in warnings
    )
    assert any(
        "6 of 32 items share their description with another item (1 distinct text among" in line
        for line in warnings
    )


def test_resuming_from_a_checkpoint_at_or_past_the_runs_last_step_is_refused(
    files, tiny_model_path, tmp_path
):
    """Issue #90: another run's checkpoint (step 2) named with max_steps 2 trained 0 steps and saved
    that run's model as fine-tuned on this catalog. Refused before the model loads; with steps
    left it resumes."""
    catalog = files / "wines.csv"
    train_recipe(_recipe(tiny_model_path, catalog, tmp_path / "other", save_strategy="steps", save_steps=2))
    checkpoint = tmp_path / "other" / "checkpoint-2"
    assert checkpoint.is_dir()
    with pytest.raises(
        UsageError, match="checkpoint-2 is at step 2, and this run ends at step 2 .*train nothing"
    ):
        train_recipe(
            _recipe(tiny_model_path, catalog, tmp_path / "mine", resume_from_checkpoint=str(checkpoint))
        )
    assert not (tmp_path / "mine").exists()
    run = train_recipe(
        _recipe(
            tiny_model_path, catalog, tmp_path / "on", resume_from_checkpoint=str(checkpoint), max_steps=3
        )
    )
    assert run.trainer.state.global_step == 3
