"""PyTorch's own dropout masks drawn by the compiled kernel inside an encoder: the same outputs,
gradients and generator state as PyTorch's dropout, bit for bit, and the encoder given back after."""

import contextlib

import pytest
import torch
from conftest import TINY_ENCODER
from transformers import BertConfig, BertModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from metricbert_trainer.base.dropout_masks import (
    ATTENTION_NAME,
    KernelMaskDropout,
    kernel_dropout_masks,
    unfused_attention,
)


def _tiny_bert(attention: str, attention_dropout: float, hidden_dropout: float) -> BertModel:
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=50,
        attention_probs_dropout_prob=attention_dropout,
        hidden_dropout_prob=hidden_dropout,
        attn_implementation=attention,
        **TINY_ENCODER,
    )
    return BertModel(config)


PADDED_BATCH = {
    "input_ids": torch.tensor([[2, 7, 9, 11, 3], [2, 8, 3, 0, 0]]),
    "attention_mask": torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]),
}


def _attention_inputs(dtype):
    generator = torch.Generator().manual_seed(2)
    query, key, value = (torch.randn(3, 2, 6, 16, generator=generator).to(dtype) for _ in range(3))
    attends = torch.ones(3, 1, 6, 6, dtype=torch.bool)
    attends[1, ..., 4:] = False  # the second row's last two tokens are padding
    attends[2, :, 3, :] = False  # a query that may attend to nothing: PyTorch gives it zeros
    return query, key, value, attends


@pytest.mark.parametrize(
    "dtype, autocast",
    [(torch.float32, False), (torch.bfloat16, False), (torch.float16, False), (torch.float32, True)],
)
def test_the_unfused_attention_is_pytorchs_with_the_same_masks(dtype, autocast):
    """With dropout on a CPU, bf16, fp16 and autocast included: the output and the generator's state
    after it are those of PyTorch's scaled-dot-product attention (through transformers), bit for bit."""
    module = _tiny_bert("sdpa", 0.1, 0.1).encoder.layer[0].attention.self
    inputs = _attention_inputs(dtype)
    outputs, states = [], []
    for attention in (sdpa_attention_forward, unfused_attention):
        torch.manual_seed(4)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            output, _ = attention(module, *inputs, dropout=0.1, scaling=0.25)
        outputs.append(output)
        states.append(torch.get_rng_state())
    assert outputs[0].dtype == outputs[1].dtype and outputs[0].shape == outputs[1].shape
    assert torch.equal(outputs[0], outputs[1]) and torch.equal(*states)


def test_without_dropout_the_attention_is_pytorchs_fused_kernel():
    module = _tiny_bert("sdpa", 0.1, 0.1).encoder.layer[0].attention.self
    inputs = _attention_inputs(torch.float32)
    expected, _ = sdpa_attention_forward(module, *inputs, dropout=0.0, scaling=0.25)
    output, _ = unfused_attention(module, *inputs, dropout=0.0, scaling=0.25)
    assert torch.equal(output, expected)


def _trained_once(model, masks, bf16):
    """One forward and backward pass of ``model`` in training mode on ``PADDED_BATCH`` inside ``masks``:
    the output, every gradient (the pooler, unused, has none) and the default generator's state after them."""
    model.zero_grad()
    torch.manual_seed(3)
    with masks, torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        output = model(**PADDED_BATCH).last_hidden_state
    output.float().pow(2).sum().backward()
    gradients = {
        name: parameter.grad.clone()
        for name, parameter in model.named_parameters()
        if parameter.grad is not None
    }
    return output.detach(), gradients, torch.get_rng_state()


@pytest.mark.parametrize("bf16", [False, True])
def test_inside_the_block_an_encoder_trains_as_with_pytorchs_dropout_bit_for_bit(bf16):
    model = _tiny_bert("sdpa", 0.5, 0.5).train()
    output, gradients, state = _trained_once(model, contextlib.nullcontext(), bf16)
    with kernel_dropout_masks(model) as inside:
        assert inside.config._attn_implementation == ATTENTION_NAME
        assert {type(module) for module in model.modules()} & {torch.nn.Dropout} == set()
        with kernel_dropout_masks(model):  # a block inside a block changes nothing
            assert inside.config._attn_implementation == ATTENTION_NAME
        drawn = _trained_once(model, contextlib.nullcontext(), bf16)
    assert torch.equal(drawn[0], output) and torch.equal(drawn[2], state)
    assert drawn[1].keys() == gradients.keys() and len(gradients) > 20
    assert all(torch.equal(drawn[1][name], gradients[name]) for name in gradients)
    assert model.config._attn_implementation == "sdpa"
    assert any(type(module) is torch.nn.Dropout for module in model.modules())


def test_without_dropout_an_encoder_inside_the_block_is_as_it_was():
    model = _tiny_bert("sdpa", 0.5, 0.5)
    with torch.no_grad():
        expected = model.eval()(**PADDED_BATCH).last_hidden_state
        with kernel_dropout_masks(model):
            assert torch.equal(model(**PADDED_BATCH).last_hidden_state, expected)
            assert all(
                isinstance(module, KernelMaskDropout)
                for module in model.modules()
                if isinstance(module, torch.nn.Dropout)
            )


def test_an_eager_encoder_keeps_its_attention_and_draws_its_other_masks_from_the_kernel():
    model = _tiny_bert("eager", 0.0, 0.5).train()
    with kernel_dropout_masks(model):
        assert model.config._attn_implementation == "eager"
        assert all(type(module) is not torch.nn.Dropout for module in model.modules())
    assert model.config._attn_implementation == "eager"
    assert any(type(module) is torch.nn.Dropout for module in model.modules())
