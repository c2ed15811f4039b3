"""Trainers take what trl's and sentence-transformers' take: a model by name, and no args."""

import pytest
from transformers import PreTrainedModel

from metricbert_trainer import MetricBertConfig, MetricBertTrainer
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.recobert import RecoBertConfig, RecoBertTrainer


@pytest.mark.parametrize(
    ("trainer_class", "config_class", "suffix"),
    [(MetricBertTrainer, MetricBertConfig, "metricbert"), (RecoBertTrainer, RecoBertConfig, "recobert")],
)
def test_a_model_name_and_no_args_are_completed_with_defaults(
    trainer_class, config_class, suffix, tiny_model_path, wines_csv, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    items = load_catalog(wines_csv).dataset.select(range(8))
    trainer = trainer_class(tiny_model_path, train_dataset=items)
    assert isinstance(trainer.model, PreTrainedModel) and trainer.processing_class is not None
    assert type(trainer.args) is config_class
    assert trainer.args.output_dir.endswith(f"-{suffix}")
    assert trainer.args.learning_rate == config_class(output_dir="x").learning_rate
    assert trainer.train_dataset is items and trainer.data_collator is not None


def test_a_loaded_model_without_a_tokenizer_gets_the_one_saved_beside_it(
    tiny_model_path, wines_csv, tmp_path, monkeypatch
):
    from metricbert_trainer import load_masked_lm

    monkeypatch.chdir(tmp_path)
    items = load_catalog(wines_csv).dataset.select(range(8))
    trainer = MetricBertTrainer(load_masked_lm(tiny_model_path), train_dataset=items)
    assert trainer.processing_class is not None
    assert trainer.processing_class("Pinot Gris")["input_ids"][0] == trainer.processing_class.cls_token_id
