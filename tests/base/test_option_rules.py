"""The values each trainer option accepts: declared once per class, checked in one place."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar

import pytest

from metricbert_trainer.base.option_rules import Range, above, at_least, option_range, within
from metricbert_trainer.metricbert.config import MetricBertConfig
from metricbert_trainer.metricbert.losses import Objective
from metricbert_trainer.ner.config import NerConfig
from metricbert_trainer.recobert.config import RecoBertConfig
from metricbert_trainer.training.config import CatalogTrainerConfig

CONFIGS = (CatalogTrainerConfig, MetricBertConfig, RecoBertConfig, NerConfig)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda config: config.__name__)
def test_every_declared_range_names_an_option_of_its_class(config):
    """A misspelt name would silently check nothing."""
    names = {option.name for option in dataclasses.fields(config)}
    assert set(config.__dict__.get("option_ranges", {})) <= names


def test_ranges_include_or_exclude_their_bounds_and_refuse_nan():
    assert at_least(0).accepts(0) and not at_least(0).accepts(-1e-9)
    assert not above(0).accepts(0) and above(0).accepts(1e-9)
    half_open = within(0, 1, high_open=True)
    assert half_open.accepts(0) and not half_open.accepts(1) and str(half_open) == "in [0, 1)"
    assert not at_least(0).accepts(float("nan"))
    assert [str(bounds) for bounds in (at_least(2), above(0), Range(high=5))] == [">= 2", "> 0", "<= 5"]


@pytest.mark.parametrize(
    ("config", "option", "value", "message"),
    [
        (MetricBertConfig, "margin", -0.1, "margin must be >= 0; got -0.1."),
        (
            MetricBertConfig,
            "false_negative_margin",
            1.0,
            r"false_negative_margin must be in \[0, 1\); got 1.0.",
        ),
        (
            MetricBertConfig,
            "distill_temperature",
            float("nan"),
            "distill_temperature must be a finite number; got nan.",
        ),
        (
            MetricBertConfig,
            "mlm_probability",
            1.0,
            r"mlm_probability must be in \[0, 1\); got 1.0.",
        ),  # inherited
        (RecoBertConfig, "negative_probability", 1.5, r"negative_probability must be in \[0, 1\]; got 1.5."),
        (NerConfig, "metric_weight", -1, "metric_weight must be >= 0; got -1."),
        (MetricBertConfig, "objective", "tripplet", "Unknown objective 'tripplet'; valid choices: triplet,"),
    ],
)
def test_a_wrong_value_is_refused_with_the_rule(tmp_path, config, option, value, message):
    with pytest.raises(ValueError, match=message):
        config(output_dir=str(tmp_path), report_to="none", **{option: value})


def test_enum_options_become_members_and_a_users_subclass_gets_its_own_rules_checked(tmp_path):
    @dataclass
    class MyConfig(MetricBertConfig):
        my_weight: float = field(default=0.5, metadata={"help": "A user's own term."})
        option_ranges: ClassVar[dict[str, Range]] = {"my_weight": within(0, 1)}

    config = MyConfig(output_dir=str(tmp_path), report_to="none", objective="mnrl")
    assert config.objective is Objective.MNRL
    assert option_range(MyConfig, "margin") == at_least(0)  # the parent's rules hold too
    with pytest.raises(ValueError, match="my_weight must be in"):
        MyConfig(output_dir=str(tmp_path), report_to="none", my_weight=2.0)
    with pytest.raises(ValueError, match="margin must be >= 0"):
        MyConfig(output_dir=str(tmp_path), report_to="none", margin=-1.0)
