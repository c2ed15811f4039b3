"""One training run, the same for every family: check, lock, load, train, evaluate, save, publish.

What differs between families is what they read and how they judge a model: a catalog with
ranking annotations (MetricBERT, RecoBERT) or a tagged catalog with held-out titles (multi-task
NER). A ``RecipeFamily`` names those parts (its trainer, its data arguments, its checks and its
``prepare`` step) and ``run_training`` does everything else once, for all of them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import transformers
from transformers import PreTrainedModel, set_seed

from metricbert_trainer.base.distributed import process_group_closed_at_exit
from metricbert_trainer.errors import report_usage_errors
from metricbert_trainer.publishing.model_card import ModelCardInfo
from metricbert_trainer.scripts.arguments import ModelArguments
from metricbert_trainer.scripts.output_lock import output_folder_lock
from metricbert_trainer.scripts.preflight import files_read
from metricbert_trainer.training.config import CatalogTrainerConfig
from metricbert_trainer.training.trainer import CatalogTrainer, ModelEvaluator

logger = logging.getLogger(__name__)


@dataclass
class TrainingRun:
    """A finished recipe: the trainer (model, state, logs) and the final metrics, if any."""

    trainer: CatalogTrainer
    metrics: dict[str, float]


@dataclass
class PreparedRun:
    """What a family's ``prepare`` loads for one run, before the trainer is built.

    ``evaluator`` judges the model during training (checkpoint choice); ``final_evaluator``, when
    given, replaces it for the closing evaluation (a tagger is chosen on validation titles and
    reported on test titles). ``after_training`` runs on the main process once the model is
    saved and evaluated (a plot of the catalog, a log line on the label-free signals).
    """

    model: PreTrainedModel
    tokenizer: object
    train_dataset: object
    fields: tuple[str, ...]
    card_info: ModelCardInfo
    evaluator: ModelEvaluator | None = None
    final_evaluator: ModelEvaluator | None = None
    after_training: Callable[[CatalogTrainer], None] | None = field(default=None)


@dataclass(frozen=True)
class RecipeFamily:
    """A family of recipes: the trainer its config selects, the data arguments its recipes parse,
    the checks run before anything loads (raising ``UsageError``), and ``prepare``, which loads
    the data, the model and the evaluators of one run."""

    trainer: type[CatalogTrainer]
    data_arguments: type
    check: Callable[[ModelArguments, object, CatalogTrainerConfig], None]
    prepare: Callable[[ModelArguments, object, CatalogTrainerConfig], PreparedRun]


def run_training(
    family: RecipeFamily,
    model_args: ModelArguments,
    data_args,
    training_args: CatalogTrainerConfig,
) -> TrainingRun:
    """Checks the arguments (a ``UsageError`` before anything loads), then loads, trains,
    evaluates, saves and publishes, holding the output folder's run lock (``output_lock``)
    throughout, so a second run into the same folder is refused at once."""
    family.check(model_args, data_args, training_args)
    with output_folder_lock(
        training_args.output_dir,
        holder=training_args.process_index == 0,
        overwrite=training_args.overwrite_output_dir,
        reads=files_read(model_args, data_args, training_args),
    ):
        configure_logging(training_args)
        warn_if_cores_idle(training_args)
        set_seed(training_args.seed)
        prepared = family.prepare(model_args, data_args, training_args)
        trainer = family.trainer(
            model=prepared.model,
            args=training_args,
            train_dataset=prepared.train_dataset,
            processing_class=prepared.tokenizer,
            fields=prepared.fields,
            ranking_evaluator=prepared.evaluator,
            model_card_info=prepared.card_info,
        )
        trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
        trainer.save_model(training_args.output_dir)
        if prepared.final_evaluator is not None:
            trainer.ranking_evaluator = prepared.final_evaluator
        metrics = {}
        if trainer.ranking_evaluator is not None:
            metrics = trainer.evaluate()
            trainer.log_metrics("eval", metrics)
            trainer.save_metrics("eval", metrics)
        if prepared.after_training is not None and trainer.is_world_process_zero():
            prepared.after_training(trainer)
        # Written again now that the final evaluation is in the log, for the card's results.
        trainer.create_model_card()
        if training_args.push_to_hub:
            trainer.push_to_hub(commit_message=f"{trainer.card_method.family} training finished")
        return TrainingRun(trainer, metrics)


def run_entry_point(main: Callable[[Sequence[str]], TrainingRun]) -> TrainingRun:
    """What every recipe script's process runs once: ``main`` on the command line, a mistake in it
    reported in one line (``report_usage_errors``), the launch's process group closed before the
    process exits (``process_group_closed_at_exit``)."""
    with process_group_closed_at_exit():
        return report_usage_errors(main)


def warn_if_cores_idle(training_args: CatalogTrainerConfig) -> None:
    """``accelerate launch`` sets ``OMP_NUM_THREADS=1`` unless told otherwise (its ``--cpu`` flag does
    not change that; only ``use_cpu: true`` in a config file or ``--num_cpu_threads_per_process``
    do); on a machine without a GPU a lone process then trains on one core, about half as fast
    on two cores (benchmarks/RESULTS.md)."""
    cores = os.cpu_count() or 1
    if (
        training_args.world_size == 1
        and training_args.device.type == "cpu"
        and torch.get_num_threads() == 1 < cores
    ):
        logger.warning(
            "Training on %d of %d CPU cores (OMP_NUM_THREADS=%s, accelerate's default). Launch with "
            "`accelerate launch --num_cpu_threads_per_process %d ...` to use them all.",
            torch.get_num_threads(),
            cores,
            os.environ.get("OMP_NUM_THREADS", "unset"),
            cores,
        )


def configure_logging(training_args: CatalogTrainerConfig) -> None:
    """transformers' levels for its own loggers (``log_level``, ``log_level_replica``); this
    package's few INFO lines (the catalog loaded, the max_length chosen, the MLM head's warm-up)
    shown on the main process by default, as transformers' example scripts show theirs, while
    transformers' own chatter stays at its default of warnings."""
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    level = training_args.get_process_log_level()
    transformers.utils.logging.set_verbosity(level)
    shows_info = training_args.log_level == "passive" and training_args.should_log
    logging.getLogger("metricbert_trainer").setLevel(logging.INFO if shows_info else level)
