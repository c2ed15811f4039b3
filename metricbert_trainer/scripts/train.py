"""Every recipe's command line and family registry, and the catalog families' run.

The scripts under ``recipes/`` only name their default YAML config and config class; data-set
specifics live in that YAML, never in library code. The run itself is ``run.run_training``,
the same for every family (``RECIPE_FAMILIES``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import datasets
from transformers import AutoTokenizer

from metricbert_trainer.base.modeling import (
    is_partitioned,
    load_masked_lm,
    resolve_model_name,
    whole_copy,
    whole_model_loading,
)
from metricbert_trainer.data.annotations import load_annotations
from metricbert_trainer.data.catalog import Catalog, CatalogError, catalog_column, load_catalog
from metricbert_trainer.data.lengths import resolve_max_length
from metricbert_trainer.data.sectioned_catalog import load_sectioned_catalog
from metricbert_trainer.errors import UsageError
from metricbert_trainer.evaluation.evaluator import SequentialEvaluator
from metricbert_trainer.evaluation.label_free import LabelFreeEvaluator, holdout_split
from metricbert_trainer.metricbert.config import MetricBertConfig
from metricbert_trainer.metricbert.trainer import MetricBertTrainer
from metricbert_trainer.ner.config import NerConfig
from metricbert_trainer.ner.trainer import NerTrainer
from metricbert_trainer.publishing.model_card import ModelCardInfo
from metricbert_trainer.publishing.plots import plot_catalog_before_after
from metricbert_trainer.recobert import RecoBertConfig, RecoBertTrainer
from metricbert_trainer.scripts.arguments import DataArguments, ModelArguments, parse_recipe_args
from metricbert_trainer.scripts.ner import NerDataArguments, prepare_ner_run
from metricbert_trainer.scripts.preflight import (
    check_recipe_arguments,
    check_schedule,
    check_tagging_arguments,
)
from metricbert_trainer.scripts.run import (
    PreparedRun,
    RecipeFamily,
    TrainingRun,
    run_entry_point,
    run_training,
)
from metricbert_trainer.training.config import CatalogTrainerConfig
from metricbert_trainer.training.trainer import CatalogTrainer, ModelEvaluator

logger = logging.getLogger(__name__)


def main(
    args: Sequence[str] | None = None,
    default_config: str | Path | None = None,
    config_class: type[CatalogTrainerConfig] = MetricBertConfig,
) -> TrainingRun:
    """A training recipe from its command line: parse, then ``train``. Raises ``UsageError`` for a
    mistake in the arguments.

    ``config_class`` picks the family and its objective: ``MetricBertConfig`` (MetricBERT and its
    loss family), ``RecoBertConfig`` (RecoBERT) or ``NerConfig`` (multi-task NER), or a user's
    subclass of one of them (``RECIPE_FAMILIES``).
    """
    family = recipe_family_for(config_class)
    model_args, data_args, training_args = parse_recipe_args(
        (ModelArguments, family.data_arguments, config_class), args, default_config=default_config
    )
    return train(model_args, data_args, training_args)


def run_recipe(
    default_config: str | Path, config_class: type[CatalogTrainerConfig] = MetricBertConfig
) -> TrainingRun:
    """A recipe script's entry point (``run_entry_point``): its command line over
    ``default_config`` (a ``--config`` given there wins)."""
    return run_entry_point(lambda argv: main(argv, default_config=default_config, config_class=config_class))


def train(model_args: ModelArguments, data_args, training_args: CatalogTrainerConfig) -> TrainingRun:
    """One run of the family ``training_args`` selects (``run.run_training``)."""
    return run_training(recipe_family_for(training_args), model_args, data_args, training_args)


def check_catalog_recipe(
    model_args: ModelArguments, data_args: DataArguments, training_args: CatalogTrainerConfig
) -> None:
    """``preflight``'s checks of a catalog recipe, knowing whether its trainer selects models
    without labels (``label_free_selection``)."""
    check_recipe_arguments(
        model_args, data_args, training_args, trainer_class_for(training_args).label_free_selection
    )


def check_something_to_evaluate(
    data_args: DataArguments, training_args: CatalogTrainerConfig, items: int, held_out: Sequence[int]
) -> None:
    """Without annotations, a run that evaluates ranks the label-free signals on held-out items;
    a catalog too small to hold any out (``holdout_split``) would fail after the model load with
    transformers' "evaluation requires an eval_dataset". Refused here, before the model loads."""
    evaluates = training_args.eval_strategy != "no" or training_args.eval_on_start
    if evaluates and not data_args.annotations and not held_out:
        raise UsageError(
            f"the catalog's {items} items are too few to hold out any for the label-free signals (a fifth "
            "of the catalog, at least 20 items, is needed: 100 items or more), and without annotations they "
            "are all a run evaluates: give --annotations, or set --eval_strategy no --eval_on_start false"
        )


def prepare_catalog_run(
    model_args: ModelArguments, data_args: DataArguments, training_args: CatalogTrainerConfig
) -> PreparedRun:
    """A catalog recipe's run: the catalog (less the items held out for label-free selection),
    the masked-LM model, the ranking evaluator over the annotations and the label-free one."""
    catalog = load_recipe_catalog(data_args)
    # Read now, so that a misspelt column fails before training rather than after it.
    plot_labels = plot_column_values(data_args, catalog) if data_args.plot_column else None
    trainer_class = trainer_class_for(training_args)
    held_out: list[int] = []
    train_dataset = catalog.dataset
    if trainer_class.label_free_selection and data_args.selection_holdout:
        train_rows, held_out = holdout_split(len(catalog), data_args.selection_holdout)
        train_dataset = train_dataset.select(train_rows)
    if data_args.max_train_items is not None:
        train_dataset = train_dataset.select(range(min(data_args.max_train_items, len(train_dataset))))
    check_schedule(training_args, len(train_dataset))
    check_something_to_evaluate(data_args, training_args, len(catalog), held_out)
    model_path = resolve_model_name(model_args.model_name_or_path)
    tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=model_args.trust_remote_code)
    model = load_masked_lm(model_path, trust_remote_code=model_args.trust_remote_code)
    resolve_max_length(training_args, tokenizer, train_dataset, catalog.fields, model)
    evaluators = [build_ranking_evaluator(data_args, training_args, catalog)]
    if held_out:
        # On the run's device: the trainer would move the model there anyway, and on a GPU machine
        # the start's encoding on the host took 14 s, a fifth of a whole Debian run (RESULTS.md).
        start = whole_copy(model) if is_partitioned(model) else model
        evaluators.append(
            LabelFreeEvaluator.from_start(
                start.to(training_args.device),
                tokenizer,
                catalog,
                held_out,
                batch_size=training_args.per_device_eval_batch_size,
                max_length=training_args.max_length,
            )
        )
    evaluators = [evaluator for evaluator in evaluators if evaluator is not None]

    def after_training(trainer: CatalogTrainer) -> None:
        report_label_free_change(trainer.state.log_history)
        if plot_labels is not None:
            plot_recipe_embeddings(model_args, data_args, training_args, catalog, plot_labels)

    return PreparedRun(
        model=model,
        tokenizer=tokenizer,
        train_dataset=train_dataset,
        fields=catalog.fields,
        evaluator=SequentialEvaluator(evaluators) if evaluators else None,
        card_info=ModelCardInfo(
            base_model=model_args.model_name_or_path,
            catalog=data_args.source,
            catalog_items=len(train_dataset),
            annotations=data_args.annotations or None,
            text_fields=catalog.fields,
            dataset_name=data_args.dataset_name,
            license=model_args.model_license,
        ),
        after_training=after_training,
    )


# The family each kind of training arguments selects; a user's subclass of a config trains
# with the family of its nearest registered ancestor (``recipe_family_for``), and a family of
# one's own is one entry more.
RECIPE_FAMILIES: dict[type[CatalogTrainerConfig], RecipeFamily] = {
    MetricBertConfig: RecipeFamily(
        MetricBertTrainer, DataArguments, check_catalog_recipe, prepare_catalog_run
    ),
    RecoBertConfig: RecipeFamily(RecoBertTrainer, DataArguments, check_catalog_recipe, prepare_catalog_run),
    NerConfig: RecipeFamily(NerTrainer, NerDataArguments, check_tagging_arguments, prepare_ner_run),
}
# The config class each family's name stands for, in study files (``family: recobert``): the
# registered config's name without "Config", lower case.
FAMILIES: dict[str, type[CatalogTrainerConfig]] = {
    config.__name__.removesuffix("Config").lower(): config for config in RECIPE_FAMILIES
}


def recipe_family_for(config: CatalogTrainerConfig | type[CatalogTrainerConfig]) -> RecipeFamily:
    """The family of the nearest registered class among ``config``'s classes (``RECIPE_FAMILIES``)."""
    config_class = config if isinstance(config, type) else type(config)
    for ancestor in config_class.__mro__:
        if ancestor in RECIPE_FAMILIES:
            return RECIPE_FAMILIES[ancestor]
    raise UsageError(
        f"No trainer is registered for {config_class.__name__}: derive it from "
        f"{' or '.join(config.__name__ for config in RECIPE_FAMILIES)}, or add it to "
        "scripts.train.RECIPE_FAMILIES."
    )


def trainer_class_for(training_args: CatalogTrainerConfig) -> type[CatalogTrainer]:
    """The trainer of ``training_args``' family (``recipe_family_for``)."""
    return recipe_family_for(training_args).trainer


def plot_recipe_embeddings(
    model_args: ModelArguments,
    data_args: DataArguments,
    training_args: CatalogTrainerConfig,
    catalog: Catalog,
    labels: list[str],
) -> Path:
    """The PCA of the catalog under the starting and the trained model, coloured by ``labels``
    (``plot_column_values``), into the output folder. Both models are loaded afresh and whole on
    this process alone, so the plot works whatever engine trained them. A run trained under bf16
    encodes them under bf16 too: on a CPU that chose it, 2.5 times as fast as in fp32 (the
    evaluation keeps fp32, whose numbers the docs quote)."""
    start = resolve_model_name(model_args.model_name_or_path)
    with whole_model_loading():
        pairs = [
            (
                load_masked_lm(path, trust_remote_code=model_args.trust_remote_code),
                AutoTokenizer.from_pretrained(path),
            )
            for path in (start, training_args.output_dir)
        ]
    return plot_catalog_before_after(
        pairs[0],
        pairs[1],
        catalog,
        labels,
        Path(training_args.output_dir) / "embeddings_pca.png",
        column=data_args.plot_column,
        max_length=training_args.max_length,
        precision="bf16" if training_args.bf16 else "auto",
    )


def plot_column_values(data_args: DataArguments, catalog: Catalog) -> list[str]:
    """The ``plot_column`` value of each item of ``catalog``, for the plot's colours only."""
    table = data_args.catalog if data_args.catalog is not None else _load_dataset(data_args)
    return catalog_column(table, catalog, data_args.plot_column, id_column=data_args.id_column)


def load_recipe_catalog(data_args: DataArguments) -> Catalog:
    """The catalog a recipe's data arguments describe: a file, a sectioned file or a dataset."""
    if data_args.sections is not None:
        return load_sectioned_catalog(data_args.catalog, sections=data_args.sections, strict=data_args.strict)
    return load_catalog(
        data_args.catalog if data_args.catalog is not None else _load_dataset(data_args),
        id_column=data_args.id_column,
        text_columns=data_args.text_columns,
        strict=data_args.strict,
        name=data_args.source,
    )


def _load_dataset(data_args: DataArguments) -> datasets.Dataset:
    try:
        return datasets.load_dataset(
            data_args.dataset, data_args.dataset_config, split=data_args.dataset_split
        )
    except (FileNotFoundError, ValueError, ConnectionError) as error:
        raise CatalogError(
            f"Cannot load the dataset {data_args.dataset!r} (config {data_args.dataset_config!r}, split "
            f"{data_args.dataset_split!r}): {error}"
        ) from error


def build_ranking_evaluator(
    data_args: DataArguments, training_args: CatalogTrainerConfig, catalog: Catalog
) -> ModelEvaluator | None:
    """Ranks ``catalog`` against the recipe's annotations the way its trainer's models rank;
    ``None`` when the recipe names no annotations."""
    if not data_args.annotations:
        return None
    annotations = load_annotations(data_args.annotations, catalog)
    return trainer_class_for(training_args).default_ranking_evaluator(catalog, annotations, training_args)


def report_label_free_change(log_history: list[dict]) -> dict[str, float] | None:
    """Logs how the label-free signals moved between the evaluation at step 0 (``eval_on_start``)
    and the last one, and returns the changes; ``None`` when there is nothing to compare.

    It states the movement and draws no verdict: on the two development benchmarks each signal
    ordered the runs of one benchmark right and of the other inversely (docs/quality.md), so no
    threshold on them says whether training helped.
    """
    evaluations = [entry for entry in log_history if "eval_lf_t2d_mrr" in entry]
    if len(evaluations) < 2 or evaluations[0]["step"] != 0:
        return None
    start, end = evaluations[0], evaluations[-1]
    names = [name for name in start if name.startswith("eval_lf_")]
    changes = {name.removeprefix("eval_"): end[name] - start[name] for name in names}
    logger.info(
        "Label-free signals, step 0 -> step %d: %s (docs/quality.md: title-to-description retrieval rises with "
        "what training teaches, agreement with the starting model falls with what it forgets).",
        end["step"],
        ", ".join(f"{name.removeprefix('eval_')} {start[name]:.2f} -> {end[name]:.2f}" for name in names),
    )
    return changes


__all__ = [
    "FAMILIES",
    "RECIPE_FAMILIES",
    "TrainingRun",
    "main",
    "recipe_family_for",
    "run_recipe",
    "train",
    "trainer_class_for",
]
