"""The publishing jobs of a training run, as ``TrainerCallback``s a user can add or drop.

A ``CatalogTrainer`` starts with the jobs its family publishes (``default_publishing_callbacks``):
the model card, the sentence-transformers files (sentence encoders only) and the plot of the
loss terms. ``trainer.remove_callback(LossPlotCallback)`` drops one; a job of one's own derives
from ``PublishingCallback`` and is passed in ``callbacks=[...]`` like any callback.

Why a hook of its own, ``on_model_folder``, rather than transformers' ``on_save``: ``on_save``
fires once a checkpoint is complete, which here is after the checkpoint was published by one
rename (``base.checkpoints``), too late for the files to be part of it, and it never fires for
``save_model``. The trainer calls ``on_model_folder`` while a folder is being written: every
checkpoint, the final model, and the output folder before a push.
"""

from __future__ import annotations

from pathlib import Path

from transformers import TrainerCallback

from metricbert_trainer.publishing.model_card import card_hyperparameters, render_model_card
from metricbert_trainer.publishing.plots import plot_loss_terms
from metricbert_trainer.publishing.sentence_transformers_files import write_sentence_transformers_files

LOSS_PLOT_FILE = "loss_terms.png"
MODEL_CARD_FILE = "README.md"


class PublishingCallback(TrainerCallback):
    """A job that writes files into every model folder a ``CatalogTrainer`` saves."""

    def on_model_folder(self, folder: Path, trainer, model_name: str | None = None) -> None:
        """Writes this job's files into ``folder``; ``model_name`` names the model on a card."""
        raise NotImplementedError(f"{type(self).__name__} must define on_model_folder.")


class ModelCardCallback(PublishingCallback):
    """The model card (``README.md``): what was trained, how, on what, and how it ranks."""

    def on_model_folder(self, folder: Path, trainer, model_name: str | None = None) -> None:
        args = trainer.args
        repo_id = (trainer.hub_model_id or args.hub_model_id) if args.push_to_hub else None
        name = model_name or (repo_id or Path(args.output_dir).resolve().name).split("/")[-1]
        card = render_model_card(
            info=trainer.model_card_info,
            model_name=name,
            method=trainer.card_method,
            repo_id=repo_id,
            objective_section=trainer.objective_card_section(),
            hyperparameters=card_hyperparameters(args, trainer.state),
            log_history=trainer.state.log_history,
            trainer_tags=list(trainer._tag_names),
        )
        (folder / MODEL_CARD_FILE).write_text(card, encoding="utf-8")


class SentenceTransformersFilesCallback(PublishingCallback):
    """The files that let ``SentenceTransformer(folder)`` load the encoder with mean pooling at the
    training length (``sentence_transformers_files``)."""

    def on_model_folder(self, folder: Path, trainer, model_name: str | None = None) -> None:
        config = trainer.accelerator.unwrap_model(trainer.model).config
        write_sentence_transformers_files(
            folder, hidden_size=config.hidden_size, max_seq_length=trainer.args.max_length
        )


class LossPlotCallback(PublishingCallback):
    """``loss_terms.png``: every logged loss term over the steps (``plots.plot_loss_terms``)."""

    def on_model_folder(self, folder: Path, trainer, model_name: str | None = None) -> None:
        plot_loss_terms(trainer.state.log_history, folder / LOSS_PLOT_FILE)


def default_publishing_callbacks(sentence_encoder: bool) -> list[PublishingCallback]:
    """The jobs a trainer publishes with unless told otherwise: a tagger gets no
    sentence-transformers files, its card says how to use it instead."""
    jobs: list[PublishingCallback] = [ModelCardCallback(), LossPlotCallback()]
    if sentence_encoder:
        jobs.insert(0, SentenceTransformersFilesCallback())
    return jobs
