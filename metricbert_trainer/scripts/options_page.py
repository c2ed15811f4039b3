"""``docs/options.md``: every recipe option, rendered from the configuration dataclasses' own help.

The help text in each field's metadata is what ``--help`` prints; a page written by hand beside
it drifts (``cpu_bf16`` was once "1.4x" in one and "1.5x" in the other). So the page is generated
from the same metadata, grouped by the dataclass that declares each option, and a test fails when
the committed page differs from what this module renders:

    python -m metricbert_trainer.scripts.options_page > docs/options.md
"""

from __future__ import annotations

import dataclasses
import enum

from metricbert_trainer.base.config import CatalogTrainerConfig
from metricbert_trainer.metricbert.config import MetricBertConfig
from metricbert_trainer.publishing.markdown import markdown_table
from metricbert_trainer.recobert.config import RecoBertConfig
from metricbert_trainer.scripts.arguments import DataArguments, ModelArguments

# (heading, the dataclass whose own fields the group lists), in the order a user meets them.
GROUPS = (
    ("The model", ModelArguments),
    ("The catalog and its evaluation", DataArguments),
    ("Every trainer: truncation, masking, precision, checkpoints", CatalogTrainerConfig),
    ("MetricBERT: the loss family, mining, the guide and the guard", MetricBertConfig),
    ("RecoBERT", RecoBertConfig),
)


def own_fields(config: type) -> list[dataclasses.Field]:
    """The fields ``config`` declares or redeclares (its parent's, and TrainingArguments', excluded
    unless their default or help changes here)."""
    parents = [base for base in config.__mro__[1:] if dataclasses.is_dataclass(base)]
    inherited = {}
    for base in reversed(parents):  # the nearest parent's declaration last, so it wins
        inherited.update({option.name: option for option in dataclasses.fields(base)})
    return [
        option
        for option in dataclasses.fields(config)
        if option.name not in inherited
        or (option.default, option.metadata.get("help"))
        != (inherited[option.name].default, inherited[option.name].metadata.get("help"))
    ]


def default_text(option: dataclasses.Field) -> str:
    if option.default_factory is not dataclasses.MISSING:
        value = option.default_factory()
    elif option.default is dataclasses.MISSING:
        return "required"
    else:
        value = option.default
    if isinstance(value, enum.Enum):
        value = value.value
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
        rows = [
            [f"`{option.name}`", default_text(option), " ".join(option.metadata.get("help", "").split())]
            for option in own_fields(config)
        ]
        sections += [
            "",
            f"## {heading} (`{config.__name__}`)",
            "",
            markdown_table(["option", "default", "meaning"], rows),
        ]
    return "\n".join(sections) + "\n"


if __name__ == "__main__":
    print(options_page(), end="")
