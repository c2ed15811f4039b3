"""One short multi-task NER run on the tiny model: both loss terms logged, the held-out metrics in
``evaluate()``, and a saved folder that ``pipeline("token-classification")`` and the CLI load."""

from __future__ import annotations

import json

import pytest
from conftest import REPO_ROOT
from huggingface_hub import ModelCard
from transformers import AutoModelForTokenClassification, pipeline

from metricbert_trainer.cli import main as cli_main
from metricbert_trainer.ner import NerConfig, NerTrainer, TaggingEvaluator, load_tagged_catalog
from metricbert_trainer.ner.losses import title_description_loss

WINE_TAGS = REPO_ROOT / "data" / "wines_ner" / "wine-titles-ner.jsonl"


@pytest.fixture(scope="module")
def catalog():
    return load_tagged_catalog(WINE_TAGS)


def test_short_run_logs_both_terms_evaluates_and_saves_a_pipeline_model(tmp_path, tiny_model_path, catalog):
    output = tmp_path / "tagger"
    trainer = NerTrainer(
        tiny_model_path,
        NerConfig(
            output_dir=str(output),
            max_steps=4,
            logging_steps=2,
            per_device_train_batch_size=8,
            learning_rate=1e-3,
            max_length=64,
            report_to="none",
            save_strategy="no",
            # bf16 autocast on every CPU: the trainer's evaluation must still be the fp32 one the
            # reloaded model gives below (tests/evaluation/test_encoding.py checks the logits).
            bf16=True,
            use_cpu=True,
        ),
        labels=catalog.labels,
        train_dataset=catalog.train.select(range(32)),
        ranking_evaluator=TaggingEvaluator(catalog.test.select(range(40)), max_length=64),
    )
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert all("tagging_loss" in entry and "logistic_triplet_loss" in entry for entry in logged)
    training_forward = trainer.model.__dict__["forward"]  # accelerate's bf16 autocast wrapper
    metrics = trainer.evaluate()
    assert trainer.model.__dict__["forward"] is training_forward  # training goes on under bf16
    assert set(metrics) >= {
        "eval_precision",
        "eval_recall",
        "eval_f1",
        "eval_exact_match",
        "eval_token_accuracy",
    }
    trainer.save_model()
    card = (output / "README.md").read_text(encoding="utf-8")
    assert "pipeline_tag: token-classification" in card and 'pipeline("token-classification"' in card
    # The card's evaluation is the tagger's own: its table and the Hub's model index.
    evaluation = card.split("## Evaluation")[1]
    assert "| F1 | Exact match | Token accuracy |" in evaluation and "held-out titles" in evaluation
    data = ModelCard.load(output / "README.md").data
    results = {result.metric_type: result.metric_value for result in data.eval_results}
    assert set(results) == {"precision", "recall", "f1", "exact_match", "token_accuracy"}
    assert results["f1"] == pytest.approx(metrics["eval_f1"], abs=1e-4)
    assert {result.task_name for result in data.eval_results} == {"Named entity recognition"}
    assert not (output / "modules.json").exists()  # a tagger is not a sentence encoder

    tagger = pipeline("token-classification", model=str(output))
    assert tagger.model.config.id2label[0] == "O"
    assert isinstance(tagger(catalog.test[0]["title"]), list)
    reloaded = AutoModelForTokenClassification.from_pretrained(output)
    again = TaggingEvaluator(catalog.test.select(range(40)), max_length=64)(
        reloaded, trainer.processing_class
    )
    assert again == pytest.approx(
        {
            name.removeprefix("eval_"): value
            for name, value in metrics.items()
            if name.removeprefix("eval_") in again
        }
    )

    report = tmp_path / "metrics.json"
    assert (
        cli_main(
            [
                "ner-evaluate",
                "--model",
                str(output),
                "--data",
                str(WINE_TAGS),
                "--max-length",
                "64",
                "--output",
                str(report),
            ]
        )
        == 0
    )
    assert set(json.loads(report.read_text())["metrics"]) == set(again)


def test_a_tagger_loaded_by_name_draws_its_classifier_from_the_runs_seed(tmp_path, tiny_model_path, catalog):
    import torch

    def classifier(seed: int) -> torch.Tensor:
        torch.rand(7)  # the generators moved on, as anything run before would move them
        args = NerConfig(output_dir=str(tmp_path), seed=seed, report_to="none")
        trainer = NerTrainer(tiny_model_path, args, labels=catalog.labels, train_dataset=catalog.train)
        return trainer.model.classifier.weight.detach().clone()

    assert torch.equal(classifier(3), classifier(3)) and not torch.equal(classifier(3), classifier(4))


def test_ner_alone_reads_no_descriptions(tmp_path, tiny_model_path, catalog):
    trainer = NerTrainer(
        tiny_model_path,
        NerConfig(output_dir=str(tmp_path), max_steps=1, max_length=32, report_to="none", metric_weight=0),
        labels=catalog.labels,
        train_dataset=catalog.train.select(range(8)),
    )
    batch = trainer.data_collator([catalog.train[index] for index in range(4)])
    assert "description_input_ids" not in batch and batch["labels"].shape == batch["input_ids"].shape
    trainer.train()
    assert "logistic_triplet_loss" not in trainer.state.log_history[0]


def test_the_metric_term_anchors_titles_on_other_items_descriptions():
    loss = title_description_loss("contrastive")
    config = loss.get_config_dict()
    assert [config[name] for name in ("objective", "anchors", "negative_pool", "mining")] == [
        "contrastive",
        "title",
        "other_field",
        "random",
    ]
    with pytest.raises(ValueError, match="mining=random does not apply to objective mnrl"):
        NerConfig(output_dir="unused", objective="mnrl")


@pytest.mark.slow
def test_checkpoints_are_chosen_on_the_validation_titles_and_the_final_metrics_are_the_test_titles(
    tmp_path, tiny_model_path
):
    """With a validation split the evaluations during training read the validation titles only,
    and the run's final metrics the test titles, so the held-out titles choose nothing."""
    import pandas as pd

    from metricbert_trainer.scripts.train import main as train_recipe

    rows = pd.read_json(WINE_TAGS, lines=True).head(48)
    rows["split_random"] = ["train"] * 24 + ["validation"] * 10 + ["test"] * 14
    data = tmp_path / "tags.jsonl"
    rows.to_json(data, orient="records", lines=True, force_ascii=False)
    flags = [
        "--model_name_or_path",
        tiny_model_path,
        "--tagged_catalog",
        str(data),
        "--split_column",
        "split_random",
    ]
    flags += [
        "--output_dir",
        str(tmp_path / "out"),
        "--max_steps",
        "2",
        "--eval_strategy",
        "steps",
        "--eval_steps",
        "2",
    ]
    flags += [
        "--save_strategy",
        "no",
        "--load_best_model_at_end",
        "false",
        "--per_device_train_batch_size",
        "8",
    ]
    run = train_recipe(
        flags, default_config=REPO_ROOT / "recipes" / "wines" / "ner.yaml", config_class=NerConfig
    )
    catalog = load_tagged_catalog(data, split_column="split_random")
    model, tokenizer = run.trainer.model, run.trainer.processing_class
    validation = TaggingEvaluator(catalog.validation, max_length=64)(model, tokenizer)
    test = TaggingEvaluator(catalog.test, max_length=64)(model, tokenizer)
    assert validation != test  # the two title sets tell apart which one was read
    during = [entry for entry in run.trainer.state.log_history if "eval_f1" in entry][0]
    assert during["eval_f1"] == pytest.approx(validation["f1"]) and during["step"] == 2
    assert run.metrics["eval_f1"] == pytest.approx(test["f1"])
    assert run.metrics["eval_token_accuracy"] == pytest.approx(test["token_accuracy"])
