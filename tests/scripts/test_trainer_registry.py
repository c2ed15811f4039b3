"""A user's subclass of a trainer config trains with its family's trainer through the recipe's
``train()``; a config of no registered family is refused in one line. Real recipe, tiny model."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from conftest import QUICK_RUN, flags

from metricbert_trainer.errors import UsageError
from metricbert_trainer.metricbert.config import MetricBertConfig
from metricbert_trainer.metricbert.trainer import MetricBertTrainer
from metricbert_trainer.recobert import RecoBertConfig, RecoBertTrainer
from metricbert_trainer.scripts.train import main as train_recipe
from metricbert_trainer.scripts.train import trainer_class_for
from metricbert_trainer.training.config import CatalogTrainerConfig


@dataclass
class TeamConfig(MetricBertConfig):
    """What a team adds to the MetricBERT options: one field of its own."""

    experiment_tag: str = field(default="baseline", metadata={"help": "The team's run label."})


def test_a_subclass_trains_with_its_familys_trainer(files, tiny_model_path, tmp_path):
    options = flags(
        model_name_or_path=tiny_model_path,
        catalog=files / "wines.csv",
        annotations="",
        output_dir=tmp_path / "run",
        save_strategy="no",
        mlm_head_warmup_steps=0,
        report_to="none",
        disable_tqdm="true",
        experiment_tag="shorter-margin",
        **{**QUICK_RUN, "max_train_items": 32, "max_steps": 2},
    )
    run = train_recipe(options, config_class=TeamConfig)
    assert type(run.trainer) is MetricBertTrainer
    assert run.trainer.args.experiment_tag == "shorter-margin"
    assert run.trainer.state.global_step == 2


def test_the_nearest_registered_class_decides_and_an_unknown_family_is_refused(tmp_path):
    assert trainer_class_for(RecoBertConfig(output_dir=str(tmp_path))) is RecoBertTrainer
    with pytest.raises(UsageError, match="No trainer is registered for CatalogTrainerConfig"):
        trainer_class_for(CatalogTrainerConfig(output_dir=str(tmp_path)))
