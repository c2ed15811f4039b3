"""Which modules share an FSDP2 group. The sharding itself runs in two processes in
``test_distributed.py::test_fsdp2_shards_the_whole_objective_trains_like_ddp_and_resumes_exactly``."""

from __future__ import annotations

import pytest
from conftest import TINY_ENCODER
from transformers import (
    AutoModelForMaskedLM,
    AutoModelForTokenClassification,
    RobertaConfig,
    RobertaForMaskedLM,
)

from metricbert_trainer.base.fsdp2 import shared_parameters, tied_parameter_group
from metricbert_trainer.errors import UsageError


def wraps_classes(*names: str):
    """A wrap policy like accelerate's transformer-based one, for the classes ``names``."""
    return lambda module: type(module).__name__ in names


def test_bert_embeddings_and_mlm_head_share_a_group_that_holds_every_tied_parameter(tiny_model_path):
    model = AutoModelForMaskedLM.from_pretrained(tiny_model_path)
    group = tied_parameter_group(model, wraps_classes(*model._no_split_modules))
    assert group == [model.bert.embeddings, model.cls]
    grouped = {id(parameter) for module in group for parameter in module.parameters()}
    # The decoder's weight (the word embeddings) and its bias (the head's own bias).
    assert len(shared_parameters(model)) == 2 and shared_parameters(model) <= grouped
    layers = {id(parameter) for layer in model.bert.encoder.layer for parameter in layer.parameters()}
    assert not layers & grouped


def test_a_policy_that_leaves_the_embeddings_alone_groups_the_word_table_itself(tiny_model_path):
    model = AutoModelForMaskedLM.from_pretrained(tiny_model_path)
    assert tied_parameter_group(model, wraps_classes("BertLayer")) == [
        model.bert.embeddings.word_embeddings,
        model.cls,
    ]


def test_roberta_groups_its_lm_head(tokenizer):
    # RoBERTa's positions start after its padding index, hence two positions more than BERT's 128.
    config = RobertaConfig(vocab_size=tokenizer.vocab_size, max_position_embeddings=130, **TINY_ENCODER)
    model = RobertaForMaskedLM(config)
    group = tied_parameter_group(model, wraps_classes(*model._no_split_modules))
    assert group == [model.roberta.embeddings, model.lm_head]
    grouped = {id(parameter) for module in group for parameter in module.parameters()}
    assert len(shared_parameters(model)) == 2 and shared_parameters(model) <= grouped


def test_a_model_that_ties_nothing_needs_no_shared_group(tiny_model_path):
    model = AutoModelForTokenClassification.from_pretrained(tiny_model_path, num_labels=3)
    assert tied_parameter_group(model, wraps_classes(*model._no_split_modules)) == []


def test_tied_parameters_in_a_head_this_package_does_not_know_are_refused(tiny_model_path):
    model = AutoModelForMaskedLM.from_pretrained(tiny_model_path)
    model.renamed_head = model.cls
    del model.cls
    with pytest.raises(UsageError, match="ddp.yaml"):
        tied_parameter_group(model, wraps_classes("BertLayer"))
