"""docs/options.md is generated from the configuration dataclasses, so it cannot drift from --help."""

import dataclasses

from conftest import REPO_ROOT
from transformers import TrainingArguments

from metricbert_trainer.base.parameter_docs import own_fields
from metricbert_trainer.metricbert.config import MetricBertConfig
from metricbert_trainer.ner.config import NerConfig
from metricbert_trainer.recobert.config import RecoBertConfig
from metricbert_trainer.scripts.arguments import DataArguments, ModelArguments
from metricbert_trainer.scripts.ner import NerDataArguments
from metricbert_trainer.scripts.options_page import GROUPS, options_page


def test_the_committed_page_is_the_generated_one():
    committed = (REPO_ROOT / "docs" / "options.md").read_text(encoding="utf-8")
    assert committed == options_page(), (
        "docs/options.md is out of date: python -m metricbert_trainer.scripts.options_page > docs/options.md"
    )


def test_every_option_of_the_recipes_is_on_the_page_with_its_help():
    """Each group lists what its dataclass adds or changes (RecoBERT, say, its own max_length);
    together they cover every option that is not a plain TrainingArguments field."""
    page = options_page()
    listed = {option.name for _, config in GROUPS for option in own_fields(config)}
    for config in (
        MetricBertConfig,
        RecoBertConfig,
        NerConfig,
        ModelArguments,
        DataArguments,
        NerDataArguments,
    ):
        names = {option.name for option in dataclasses.fields(config)}
        plain = {option.name for option in dataclasses.fields(TrainingArguments)}
        assert names - plain <= listed
    for name in (
        "false_negative_margin",
        "distill_weight",
        "selection_holdout",
        "cpu_bf16",
        "model_name_or_path",
    ):
        assert f"| `{name}` |" in page
    help_text = next(
        option for option in dataclasses.fields(MetricBertConfig) if option.name == "margin"
    ).metadata
    assert help_text["help"] in page
