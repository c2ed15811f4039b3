"""The multi-task NER family's part of a run: its data arguments, its checks and ``prepare``.

``recipes/ner/train.py`` runs it through ``scripts.train.run_recipe`` with ``NerConfig``, like
every recipe (``scripts.run.run_training``); the data-set specifics live in its YAML.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from transformers import AutoTokenizer

from metricbert_trainer.base.modeling import resolve_model_name
from metricbert_trainer.base.parameter_docs import documented_parameters
from metricbert_trainer.data.lengths import resolve_max_length
from metricbert_trainer.ner.config import NerConfig
from metricbert_trainer.ner.dataset import load_tagged_catalog
from metricbert_trainer.ner.evaluator import TaggingEvaluator
from metricbert_trainer.ner.modeling import load_tagger
from metricbert_trainer.publishing.model_card import ModelCardInfo
from metricbert_trainer.scripts.arguments import ModelArguments
from metricbert_trainer.scripts.preflight import check_schedule
from metricbert_trainer.scripts.run import PreparedRun


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


def prepare_ner_run(
    model_args: ModelArguments, data_args: NerDataArguments, training_args: NerConfig
) -> PreparedRun:
    """A multi-task NER run: the tagged catalog's training titles, a tagger of its labels,
    checkpoints chosen on the validation titles (the test titles where the split names none)
    and the final metrics on the test titles, read once."""
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
    return PreparedRun(
        model=model,
        tokenizer=tokenizer,
        train_dataset=train_dataset,
        fields=fields,
        evaluator=tagging_evaluator(catalog.validation or catalog.test, training_args),
        final_evaluator=tagging_evaluator(catalog.test, training_args),
        card_info=ModelCardInfo(
            base_model=model_args.model_name_or_path,
            catalog=data_args.tagged_catalog,
            catalog_items=len(train_dataset),
            text_fields=fields,
            dataset_name=data_args.dataset_name,
            license=model_args.model_license,
            tags=["ner"],
        ),
    )


def tagging_evaluator(titles, training_args: NerConfig) -> TaggingEvaluator:
    return TaggingEvaluator(
        titles, batch_size=training_args.per_device_eval_batch_size, max_length=training_args.max_length
    )
