"""Which modules share an FSDP2 group. The sharding itself runs in two processes in
``test_distributed.py::test_fsdp2_shards_the_whole_objective_trains_like_ddp_and_resumes_exactly``."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModel, AutoModelForMaskedLM, RobertaConfig, RobertaForMaskedLM

from metricbert_trainer.base.fsdp2 import tied_parameter_group
from metricbert_trainer.errors import UsageError


def wraps_classes(*names: str):
    """A wrap policy like accelerate's transformer-based one, for the classes ``names``."""
    return lambda module: type(module).__name__ in names


def shared_parameters(model: torch.nn.Module) -> set[int]:
    seen, shared = set(), set()
    for _, parameter in model.named_parameters(remove_duplicate=False):
        (shared if id(parameter) in seen else seen).add(id(parameter))
    return shared


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
    config = RobertaConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=130,
    )
    model = RobertaForMaskedLM(config)
    group = tied_parameter_group(model, wraps_classes(*model._no_split_modules))
    assert group == [model.roberta.embeddings, model.lm_head]
    grouped = {id(parameter) for module in group for parameter in module.parameters()}
    assert len(shared_parameters(model)) == 2 and shared_parameters(model) <= grouped


def test_a_model_without_an_mlm_head_is_refused_with_the_engines_that_work(tiny_model_path):
    with pytest.raises(UsageError, match="ddp.yaml"):
        tied_parameter_group(AutoModel.from_pretrained(tiny_model_path), wraps_classes("BertLayer"))
