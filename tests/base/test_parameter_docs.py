"""The configuration classes' ``Parameters:`` docstrings are written from their fields' help."""

import dataclasses

import pytest

from metricbert_trainer.base.parameter_docs import documented_parameters, own_fields
from metricbert_trainer.metricbert.config import MetricBertConfig
from metricbert_trainer.recobert.config import RecoBertConfig


def test_the_docstring_lists_every_own_field_with_its_help_under_its_group():
    doc = MetricBertConfig.__doc__
    assert doc.startswith("``TrainingArguments`` plus MetricBERT's loss")
    parameters = doc.split("Parameters:", 1)[1]
    guard = parameters.split("> The guard against forgetting", 1)[1].split("\n    > ", 1)[0]
    assert "distill_weight (`float`, *optional*, defaults to `1.0`):" in guard
    assert "distill_temperature" in guard and "objective" not in guard
    for option in own_fields(MetricBertConfig):
        assert f"\n    {option.name} (`" in parameters
        first_words = " ".join(option.metadata["help"].split()[:4])
        assert first_words in " ".join(parameters.split()), option.name
    # A redeclared field is documented where its default changes: RecoBERT's own max_length.
    assert "max_length (`int`, *optional*, defaults to `256`)" in RecoBertConfig.__doc__


def test_a_field_left_out_of_the_groups_fails_when_the_class_is_defined():
    with pytest.raises(TypeError, match=r"missing \['beta'\], not fields \['gamma'\], repeated \['alpha'\]"):

        @documented_parameters({"One": ("alpha",), "Two": ("alpha", "gamma")})
        @dataclasses.dataclass
        class Settings:
            """Two settings."""

            alpha: int = dataclasses.field(default=1, metadata={"help": "The first."})
            beta: int = dataclasses.field(default=2, metadata={"help": "The second."})
