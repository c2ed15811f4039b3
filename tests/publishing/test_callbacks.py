"""The publishing jobs are callbacks: each trainer starts with its family's, a user drops one or
adds one of their own, and every saved folder (checkpoints and the final model) gets their files."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import bare_config

from metricbert_trainer.base.modeling import load_masked_lm
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.metricbert.trainer import MetricBertTrainer
from metricbert_trainer.ner.trainer import NerTrainer
from metricbert_trainer.publishing.callbacks import (
    LOSS_PLOT_FILE,
    LossPlotCallback,
    ModelCardCallback,
    PublishingCallback,
    SentenceTransformersFilesCallback,
)


@pytest.fixture(scope="module")
def wine_items(wines_csv):
    return load_catalog(wines_csv).dataset.select(range(32))


class StepNote(PublishingCallback):
    """A user's job: a file naming the step the folder was saved at."""

    def on_model_folder(self, folder: Path, trainer, model_name: str | None = None) -> None:
        (folder / "step.txt").write_text(str(trainer.state.global_step), encoding="utf-8")


def _trainer(tmp_path, tiny_model_path, tokenizer, wine_items, **kwargs) -> MetricBertTrainer:
    args = bare_config(
        output_dir=str(tmp_path / "out"),
        max_steps=2,
        logging_steps=1,
        save_strategy="steps",
        save_steps=1,
        per_device_train_batch_size=8,
        max_length=32,
        report_to="none",
        disable_tqdm=True,
        use_cpu=True,
        false_negative_filter=False,
        distill_weight=0.0,
    )
    return MetricBertTrainer(
        load_masked_lm(tiny_model_path), args, train_dataset=wine_items, processing_class=tokenizer, **kwargs
    )


def _jobs(trainer) -> list[type]:
    return [
        type(callback)
        for callback in trainer.callback_handler.callbacks
        if isinstance(callback, PublishingCallback)
    ]


def test_each_family_starts_with_its_publishing_jobs(
    tmp_path, tiny_model_path, tokenizer, wine_items, monkeypatch
):
    trainer = _trainer(tmp_path, tiny_model_path, tokenizer, wine_items)
    assert _jobs(trainer) == [SentenceTransformersFilesCallback, ModelCardCallback, LossPlotCallback]
    # A tagger is no sentence encoder: its folder gets no sentence-transformers files. Without
    # args it writes to <model>-ner in the working directory, which must not be the checkout's.
    monkeypatch.chdir(tmp_path)
    tagger = NerTrainer(
        str(tiny_model_path), labels=["O", "B-WINERY", "I-WINERY"], args=None, train_dataset=None
    )
    assert _jobs(tagger) == [ModelCardCallback, LossPlotCallback]


def test_a_dropped_job_writes_nothing_and_an_added_one_writes_into_every_saved_folder(
    tmp_path, tiny_model_path, tokenizer, wine_items
):
    trainer = _trainer(tmp_path, tiny_model_path, tokenizer, wine_items, callbacks=[StepNote()])
    trainer.remove_callback(LossPlotCallback)
    trainer.train()
    trainer.save_model()
    output = Path(trainer.args.output_dir)
    folders = [output / "checkpoint-1", output / "checkpoint-2", output]
    for folder in folders:
        assert (folder / "README.md").is_file() and (folder / "modules.json").is_file()
        assert not (folder / LOSS_PLOT_FILE).exists()
    assert [(folder / "step.txt").read_text() for folder in folders] == ["1", "2", "2"]


def test_a_job_given_by_the_user_is_not_doubled(tmp_path, tiny_model_path, tokenizer, wine_items):
    trainer = _trainer(tmp_path, tiny_model_path, tokenizer, wine_items, callbacks=[LossPlotCallback()])
    assert _jobs(trainer).count(LossPlotCallback) == 1
