"""``docs/options.md``: every recipe option, rendered from the configuration dataclasses' own help.

The help text in each field's metadata is what ``--help`` prints; a page written by hand beside
it drifts (``cpu_bf16`` was once "1.4x" in one and "1.5x" in the other). So the page is generated
from the same metadata, by the dataclass that declares each option and in its ``parameter_groups``
(the groups of its ``Parameters:`` docstring, ``base.parameter_docs``), and a test fails when
the committed page differs from what this module renders:

    python -m metricbert_trainer.scripts.options_page > docs/options.md
"""

from __future__ import annotations

import dataclasses
import typing
from enum import Enum

from metricbert_trainer.base.option_rules import option_range
from metricbert_trainer.base.parameter_docs import default_value, grouped_fields, help_text
from metricbert_trainer.metricbert.config import MetricBertConfig
from metricbert_trainer.ner.config import NerConfig
from metricbert_trainer.publishing.markdown import markdown_table
from metricbert_trainer.recobert.config import RecoBertConfig
from metricbert_trainer.scripts.arguments import DataArguments, ModelArguments
from metricbert_trainer.scripts.ner import NerDataArguments
from metricbert_trainer.training.config import CatalogTrainerConfig

# (heading, the dataclass whose own fields the group lists), in the order a user meets them.
GROUPS = (
    ("The model", ModelArguments),
    ("The catalog and its evaluation", DataArguments),
    ("Every trainer: truncation, masking, precision, checkpoints", CatalogTrainerConfig),
    ("MetricBERT: the loss family, mining, the guide and the guard", MetricBertConfig),
    ("RecoBERT", RecoBertConfig),
    ("Multi-task NER: the tagged titles", NerDataArguments),
    ("Multi-task NER: the loss", NerConfig),
)


def _accepts_text(config: type, option: dataclasses.Field) -> str:
    """The values ``option`` accepts, as ``base.option_rules`` checks them ("" where any value of its type goes)."""
    kind = typing.get_type_hints(config).get(option.name)
    if isinstance(kind, type) and issubclass(kind, Enum):
        return ", ".join(f"`{member.value}`" for member in kind)
    bounds = option_range(config, option.name)
    return "" if bounds is None else f"`{bounds}`"


def _default_text(option: dataclasses.Field) -> str:
    value = default_value(option)
    if value is dataclasses.MISSING:
        return "required"
    return "unset" if value is None else f"`{value}`"


def options_page() -> str:
    sections = [
        "# Recipe options",
        "",
        "Generated from the configuration dataclasses' help text by "
        "`python -m metricbert_trainer.scripts.options_page > docs/options.md` (a test keeps the two "
        "equal). Every option is a YAML key of a recipe config and a command-line flag "
        "(`--learning_rate 3e-5`); `--help` prints the same text. Every "
        "[`transformers.TrainingArguments`](https://huggingface.co/docs/transformers/main_classes/trainer#transformers.TrainingArguments) "
        "field (`learning_rate`, `num_train_epochs`, `bf16`, `eval_strategy`, `report_to`, `push_to_hub`, ...) "
        "works too; those whose default or meaning the trainers "
        "change are listed below.",
    ]
    for heading, config in GROUPS:
        sections += ["", f"## {heading} (`{config.__name__}`)"]
        groups = grouped_fields(config)
        for group, fields in groups:
            rows = [
                [f"`{option.name}`", _default_text(option), _accepts_text(config, option), help_text(option)]
                for option in fields
            ]
            subheading = [f"### {group}", ""] if len(groups) > 1 else []
            sections += ["", *subheading, markdown_table(["option", "default", "accepts", "meaning"], rows)]
    return "\n".join(sections) + "\n"


if __name__ == "__main__":
    print(options_page(), end="")
