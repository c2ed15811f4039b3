import contextlib

import pandas as pd
import pytest
import torch
from conftest import dropout_free_metric_model, intra_op_threads, masked_wine_batch

from metricbert_trainer.base.embedding_lookup import shared_word_embedding_lookup
from metricbert_trainer.metricbert.forward import PoolingInput


def _texts(wines_csv, rows=12):
    frame = pd.read_csv(wines_csv, nrows=rows)
    return list(frame.title), list(frame.description)


def _table_lookups(loss: torch.Tensor, table: torch.nn.Embedding) -> int:
    """How many embedding lookups of ``table`` the backward of ``loss`` runs: each one writes a
    dense gradient the size of the whole table."""
    seen, pending, lookups = set(), [loss.grad_fn], 0
    while pending:
        node = pending.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if type(node).__name__ == "EmbeddingBackward0":
            lookups += any(
                getattr(following, "variable", None) is table.weight for following, _ in node.next_functions
            )
        pending.extend(following for following, _ in node.next_functions)
    return lookups


def _encode_and_backward(model, inputs, shared: bool) -> list[torch.Tensor]:
    block = (
        shared_word_embedding_lookup(model, [encoded["input_ids"] for encoded in inputs])
        if shared
        else contextlib.nullcontext()
    )
    with block:
        outputs = [model.base_model(**encoded).last_hidden_state for encoded in inputs]
    loss = sum(output.square().sum() for output in outputs)
    lookups = _table_lookups(loss, model.get_input_embeddings())
    loss.backward()
    return [output.detach() for output in outputs], lookups


def test_encoder_calls_in_the_block_give_the_separate_lookups_vectors_and_gradients(
    tiny_model_path, tokenizer, wines_csv
):
    titles, descriptions = _texts(wines_csv)
    inputs = [tokenizer(texts, padding=True, return_tensors="pt") for texts in (titles, descriptions)]
    model = dropout_free_metric_model(tiny_model_path)
    results = {}
    for shared in (False, True):
        model.zero_grad()
        outputs, calls = _encode_and_backward(model, inputs, shared)
        gradients = {
            name: parameter.grad.clone()
            for name, parameter in model.named_parameters()
            if parameter.grad is not None
        }
        results[shared] = (outputs, gradients, calls)
    separate_outputs, separate_gradients, separate_calls = results[False]
    shared_outputs, shared_gradients, shared_calls = results[True]
    assert (separate_calls, shared_calls) == (2, 1)
    for shared_output, separate_output in zip(shared_outputs, separate_outputs, strict=True):
        torch.testing.assert_close(shared_output, separate_output)
    assert shared_gradients.keys() == separate_gradients.keys()
    for name, gradient in shared_gradients.items():
        torch.testing.assert_close(gradient, separate_gradients[name], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("pooling_input", list(PoolingInput))
def test_a_training_pass_writes_the_table_gradient_once(tiny_model_path, tokenizer, wines_csv, pooling_input):
    """Two fields in three length groups (and the unmasked pass beside the masked one) are 6 to 12
    encoder calls; the table's dense gradient is written once."""
    batch = masked_wine_batch(wines_csv, tokenizer, rows=12)
    model = dropout_free_metric_model(tiny_model_path)

    outputs = model(
        metric_batch=batch, fields=("title", "description"), pooling_input=pooling_input, length_groups=3
    )
    assert (
        _table_lookups(outputs["embeddings"].sum() + outputs["mlm_loss"], model.get_input_embeddings()) == 1
    )


def test_without_gradients_or_with_a_frozen_table_the_block_changes_nothing(
    tiny_model_path, tokenizer, wines_csv
):
    titles, _ = _texts(wines_csv)
    encoded = tokenizer(titles, padding=True, return_tensors="pt")
    model = dropout_free_metric_model(tiny_model_path)
    table = model.get_input_embeddings()
    with torch.no_grad(), shared_word_embedding_lookup(model, [encoded["input_ids"]]):
        assert not table._forward_hooks
    table.weight.requires_grad_(False)
    with shared_word_embedding_lookup(model, [encoded["input_ids"]]):
        assert not table._forward_hooks


def test_the_table_gradient_is_the_same_on_every_backward(tiny_model_path, tokenizer, wines_csv):
    """Threads must not change the gradient's summation order: under Adam a near-zero gradient's
    float noise becomes a full step, and two runs of one seed drift apart."""
    titles, descriptions = _texts(wines_csv, rows=32)
    inputs = [tokenizer(texts, padding=True, return_tensors="pt") for texts in (titles, descriptions)]
    model = dropout_free_metric_model(tiny_model_path)
    gradients = []
    with intra_op_threads(2):
        for _ in range(8):
            model.zero_grad()
            _encode_and_backward(model, inputs, shared=True)
            gradients.append(model.get_input_embeddings().weight.grad.clone())
    assert all(torch.equal(gradient, gradients[0]) for gradient in gradients[1:])
