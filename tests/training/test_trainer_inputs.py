"""Trainers take what trl's and sentence-transformers' take: a model by name, and no args."""

import pytest
from conftest import bare_config
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


def test_a_model_named_without_an_mlm_head_starts_from_the_runs_seed(
    tiny_model_path, wines_csv, tmp_path, monkeypatch
):
    """all-MiniLM-L6-v2 ships without an MLM head, so loading it draws one; the trainer draws it
    from the run's seed, whatever the generators did before, and another seed draws another."""
    import torch
    from transformers import BertModel

    monkeypatch.chdir(tmp_path)
    encoder_only = tmp_path / "encoder-only"
    BertModel.from_pretrained(tiny_model_path).save_pretrained(encoder_only)
    items = load_catalog(wines_csv).dataset.select(range(8))

    def head(seed: int) -> torch.Tensor:
        torch.rand(7)  # the generators moved on, as anything run before would move them
        args = bare_config(output_dir=str(tmp_path / "out"), seed=seed, report_to="none")
        trainer = MetricBertTrainer(str(encoder_only), args, processing_class=None, train_dataset=items)
        return trainer.model.cls.predictions.transform.dense.weight.detach().clone()

    assert torch.equal(head(3), head(3)) and not torch.equal(head(3), head(4))
