"""Paired-draw dropout masks: their rate, their scale, and the encoder they are put into."""

import pytest
import torch
from conftest import TINY_ENCODER
from transformers import BertConfig, BertModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from metricbert_trainer.base.dropout_masks import (
    PairedDrawDropout,
    paired_draw_attention,
    paired_draw_dropout,
    paired_draw_keep_mask,
)


def test_a_mask_keeps_the_asked_share_in_both_halves_of_each_draw():
    torch.manual_seed(0)
    keep, scale = paired_draw_keep_mask((1000, 1001), 0.9)  # an odd count: the last draw is half used
    assert keep.shape == (1000, 1001) and keep.dtype == torch.bool
    assert scale == pytest.approx(2**15 / round(0.9 * 2**15))
    flat = keep.flatten().float()
    # Low fields fill the first half of the elements, high fields the second: each keeps ~0.9.
    for part in flat.chunk(2):
        assert part.mean().item() == pytest.approx(0.9, abs=0.002)
    torch.manual_seed(0)
    assert torch.equal(paired_draw_keep_mask((1000, 1001), 0.9)[0], keep)  # the seed fixes it
    assert not torch.equal(paired_draw_keep_mask((1000, 1001), 0.9)[0], keep)
    with pytest.raises(ValueError, match="keep must"):
        paired_draw_keep_mask((4,), 0.0)


def test_the_module_scales_what_it_keeps_and_passes_the_gradient_through_the_same_mask():
    dropout = PairedDrawDropout(p=0.5)
    inputs = torch.rand(64, 32, dtype=torch.float64) + 1.0
    inputs.requires_grad_(True)
    torch.manual_seed(1)
    output = dropout(inputs)
    kept = output != 0
    assert 0.4 < kept.double().mean().item() < 0.6
    scale = 2**15 / round(0.5 * 2**15)
    assert torch.allclose(output[kept], inputs[kept] * scale)
    output.sum().backward()
    assert torch.allclose(inputs.grad, kept.double() * scale)
    dropout.eval()
    assert dropout(inputs) is inputs


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


def test_the_attention_function_is_sdpa_where_its_mask_keeps_everything():
    """Unfused, with padding, in bf16 too: the scores, softmax and product are those of PyTorch's
    scaled-dot-product attention (a keep rate that rounds to 1 draws a mask of ones)."""
    module = _tiny_bert("sdpa", 0.1, 0.1).encoder.layer[0].attention.self
    generator = torch.Generator().manual_seed(2)
    query, key, value = (torch.randn(3, 2, 6, 16, generator=generator) for _ in range(3))
    attends = torch.ones(3, 1, 6, 6, dtype=torch.bool)
    attends[1, ..., 4:] = False  # the second row's last two tokens are padding
    for dtype, tolerance in ((torch.float32, 1e-6), (torch.bfloat16, 2e-2)):
        inputs = [tensor.to(dtype) for tensor in (query, key, value)]
        expected, _ = sdpa_attention_forward(module, *inputs, attends, dropout=0.0, scaling=0.25)
        unfused, _ = paired_draw_attention(module, *inputs, attends, dropout=1e-9, scaling=0.25)
        assert torch.allclose(unfused.float(), expected.float(), atol=tolerance)
        assert unfused.dtype == dtype and unfused.shape == expected.shape


def test_inside_the_block_an_encoder_draws_paired_masks_and_gets_its_own_back_after():
    model = _tiny_bert("sdpa", 0.5, 0.5).train()
    batch = {
        "input_ids": torch.tensor([[2, 7, 9, 11, 3], [2, 8, 3, 0, 0]]),
        "attention_mask": torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]),
    }
    with torch.no_grad():
        eval_output = model.eval()(**batch).last_hidden_state
        model.train()
        torch.manual_seed(3)
        before = model(**batch).last_hidden_state
        with paired_draw_dropout(model):
            assert model.config._attn_implementation == "metricbert_paired_draw_sdpa"
            assert {type(module) for module in model.modules()} & {torch.nn.Dropout} == set()
            torch.manual_seed(3)
            inside = model(**batch).last_hidden_state
            torch.manual_seed(3)
            again = model(**batch).last_hidden_state
            evaluated = model.eval()(**batch).last_hidden_state
            model.train()
        torch.manual_seed(3)
        after = model(**batch).last_hidden_state
    assert torch.equal(inside, again)  # the seed fixes the masks
    assert not torch.allclose(inside, before, atol=1e-3)  # other masks than bernoulli_ draws
    assert torch.allclose(evaluated, eval_output, atol=1e-6)  # nothing changes without dropout
    assert model.config._attn_implementation == "sdpa"
    assert not any(isinstance(module, PairedDrawDropout) for module in model.modules())
    assert torch.equal(after, before)


def test_an_eager_encoder_keeps_its_attention_and_pairs_its_other_masks():
    model = _tiny_bert("eager", 0.0, 0.5).train()
    with paired_draw_dropout(model):
        assert model.config._attn_implementation == "eager"
        assert all(type(module) is not torch.nn.Dropout for module in model.modules())
    assert model.config._attn_implementation == "eager"
