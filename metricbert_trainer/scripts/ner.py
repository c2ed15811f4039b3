"""One multi-task NER run end to end: parse, load the tagged catalog, train, evaluate, save.

``recipes/ner/train.py`` runs it; the data-set specifics live in its YAML.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from transformers import AutoTokenizer, set_seed

from metricbert_trainer.base.modeling import resolve_model_name
from metricbert_trainer.base.parameter_docs import documented_parameters
from metricbert_trainer.data.lengths import resolve_max_length
from metricbert_trainer.ner.config import NerConfig
from metricbert_trainer.ner.dataset import load_tagged_catalog
from metricbert_trainer.ner.evaluator import TaggingEvaluator
from metricbert_trainer.ner.modeling import load_tagger
from metricbert_trainer.ner.trainer import NerTrainer
from metricbert_trainer.publishing.model_card import ModelCardInfo
from metricbert_trainer.scripts.arguments import ModelArguments, parse_recipe_args
from metricbert_trainer.scripts.output_lock import output_folder_lock
from metricbert_trainer.scripts.preflight import check_schedule, check_tagging_arguments
from metricbert_trainer.scripts.train import (
    TrainingRun,
    configure_logging,
    run_entry_point,
    warn_if_cores_idle,
)


@documented_parameters(
    {
        "The tagged catalog": (
            "tagged_catalog",
            "id_column",
            "title_column",
            "description_column",
            "tokens_column",
            "tags_column",
            "spans_column",
            "split_column",
            "max_train_items",
            "dataset_name",
        ),
    }
)
@dataclass
class NerDataArguments:
    """Where a multi-task NER recipe's tagged titles come from (``ner.dataset.load_tagged_catalog``)."""

    tagged_catalog: str = field(
        default="data/wines_ner/wine-titles-ner.jsonl",
        metadata={
            "help": "A .jsonl, .json or .parquet file of items with their titles' tags and a split column."
        },
    )
    id_column: str | None = field(
        default="id", metadata={"help": "Column of unique item ids; empty numbers rows."}
    )
    title_column: str = field(default="title", metadata={"help": "Column of the titles (the text tagged)."})
    description_column: str = field(
        default="description", metadata={"help": "Column of the descriptions (read by the metric term only)."}
    )
    tokens_column: str = field(
        default="tokens", metadata={"help": "CoNLL-style tags: the column of word lists."}
    )
    tags_column: str = field(
        default="tags", metadata={"help": "CoNLL-style tags: the column of BIO tag lists."}
    )
    spans_column: str | None = field(
        default=None,
        metadata={
            "help": "Tags as character spans over the title ([start, end, type] lists) instead of tokens/tags."
        },
    )
    split_column: str = field(
        default="split",
        metadata={
            "help": "Column saying train, validation or test: checkpoints are chosen on the validation "
            "items (on the test items where there are none), the final metrics are the test items'."
        },
    )
    max_train_items: int | None = field(
        default=None, metadata={"help": "Train on the first N training items only (for quick runs)."}
    )
    dataset_name: str | None = field(default=None, metadata={"help": "The data's name on the model card."})

    def __post_init__(self) -> None:
        self.id_column = self.id_column or None
        if self.max_train_items is not None and self.max_train_items < 2:
            raise ValueError(f"max_train_items must be at least 2; got {self.max_train_items}.")


def main(args: Sequence[str] | None = None, default_config: str | Path | None = None) -> TrainingRun:
    """A multi-task NER recipe from its command line: parse, then ``train_ner``."""
    model_args, data_args, training_args = parse_recipe_args(
        (ModelArguments, NerDataArguments, NerConfig), args, default_config=default_config
    )
    return train_ner(model_args, data_args, training_args)


def run_ner_recipe(default_config: str | Path) -> TrainingRun:
    """The NER recipe script's entry point, as ``scripts.train.run_recipe`` is the others'."""
    return run_entry_point(lambda argv: main(argv, default_config=default_config))


def train_ner(
    model_args: ModelArguments, data_args: NerDataArguments, training_args: NerConfig
) -> TrainingRun:
    """Checks the arguments (``preflight``), then trains a tagger on the training split, evaluates it
    on the held-out split (``eval_f1``, ...), saves it with its card and pushes it when asked,
    holding the output folder's run lock."""
    check_tagging_arguments(model_args, data_args, training_args)
    with output_folder_lock(
        training_args.output_dir,
        holder=training_args.process_index == 0,
        overwrite=training_args.overwrite_output_dir,
    ):
        configure_logging(training_args)
        warn_if_cores_idle(training_args)
        set_seed(training_args.seed)
        catalog = load_tagged_catalog(
            data_args.tagged_catalog,
            id_column=data_args.id_column,
            title_column=data_args.title_column,
            description_column=data_args.description_column,
            tokens_column=data_args.tokens_column,
            tags_column=data_args.tags_column,
            spans_column=data_args.spans_column,
            split_column=data_args.split_column,
        )
        train_dataset = catalog.train
        if data_args.max_train_items is not None:
            train_dataset = train_dataset.select(range(min(data_args.max_train_items, len(train_dataset))))
        check_schedule(training_args, len(train_dataset))
        path = resolve_model_name(model_args.model_name_or_path)
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=model_args.trust_remote_code)
        model = load_tagger(path, catalog.labels, trust_remote_code=model_args.trust_remote_code)
        fields = ("title", "description")
        resolve_max_length(training_args, tokenizer, train_dataset, fields, model)
        trainer = NerTrainer(
            model,
            training_args,
            train_dataset=train_dataset,
            processing_class=tokenizer,
            fields=fields,
            # Checkpoints are chosen on the validation titles where the split names any; the
            # held-out titles are then read once, for the final metrics.
            ranking_evaluator=tagging_evaluator(catalog.validation or catalog.test, training_args),
            model_card_info=ModelCardInfo(
                base_model=model_args.model_name_or_path,
                catalog=data_args.tagged_catalog,
                catalog_items=len(train_dataset),
                text_fields=fields,
                dataset_name=data_args.dataset_name,
                license=model_args.model_license,
                tags=["ner"],
            ),
        )
        trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
        trainer.save_model(training_args.output_dir)
        trainer.ranking_evaluator = tagging_evaluator(catalog.test, training_args)
        metrics = trainer.evaluate()
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)
        # Written again now that the final evaluation is in the log, for the card's results.
        trainer.create_model_card()
        if training_args.push_to_hub:
            trainer.push_to_hub(commit_message=f"{trainer.card_method.family} training finished")
        return TrainingRun(trainer, metrics)


def tagging_evaluator(titles, training_args: NerConfig) -> TaggingEvaluator:
    return TaggingEvaluator(
        titles, batch_size=training_args.per_device_eval_batch_size, max_length=training_args.max_length
    )
