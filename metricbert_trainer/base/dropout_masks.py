"""Dropout masks drawn two elements to a random number, for training on a CPU.

PyTorch draws each element of a CPU dropout mask with one 32-bit draw of its Mersenne Twister,
one after another on one core. Once the matrix products of a step run on AMX tiles, those draws
are the largest cost after the products (the profile in ``benchmarks/results/``, and
``benchmarks/RESULTS.md``). Here each 31-bit draw of ``random_`` on int32 gives two 15-bit
numbers, and an element is kept when its number is below ``round(keep * 2**15)``: half the draws,
compared in vectorised operators (timed by ``benchmarks/dropout_masks.py``). The keep
rate is that threshold over 2**15 (0.899994 for BERT's 0.9) and the kept elements are scaled by
its inverse, so a layer's expected output is its input, as with ``torch.nn.Dropout``.

The masks come from the same global generator as PyTorch's, so a seed still fixes a run and
activation checkpointing, which restores the generator's state before it recomputes a forward,
draws the same masks again; but they are other masks than ``bernoulli_`` draws for the same seed.
``paired_draw_dropout`` puts them into a BERT-family encoder for the time of a training: its
``torch.nn.Dropout`` modules and, through an attention function of its own, the dropout of the
attention probabilities, which PyTorch's scaled-dot-product attention would draw inside. Off a
CPU, and wherever no dropout is drawn (evaluation, a probability of 0), everything runs as before.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

FIELD_BITS = 15
ATTENTION_NAME = "metricbert_paired_draw_sdpa"


def paired_draw_keep_mask(shape: torch.Size | tuple[int, ...], keep: float) -> tuple[torch.Tensor, float]:
    """A boolean mask of ``shape`` on the CPU, each element kept with probability
    ``round(keep * 2**15) / 2**15``, and the scale (the inverse of that probability) for the kept ones."""
    threshold = round(keep * 2**FIELD_BITS)
    if not 0 < threshold <= 2**FIELD_BITS:
        raise ValueError(f"keep must leave some elements and be at most 1; got {keep}.")
    count = torch.Size(shape).numel()
    draws = torch.empty((count + 1) // 2, dtype=torch.int32).random_()
    fields = torch.cat([draws & (2**FIELD_BITS - 1), (draws >> FIELD_BITS) & (2**FIELD_BITS - 1)])
    return fields[:count].view(shape) < threshold, 2**FIELD_BITS / threshold


def paired_draw_dropout_function(inputs: torch.Tensor, probability: float) -> torch.Tensor:
    """``inputs`` with dropout at ``probability`` from a paired-draw mask (on the CPU), or from
    PyTorch's own dropout where the mask would keep everything or nothing."""
    if inputs.device.type != "cpu" or not 0 < probability < 1:
        return torch.nn.functional.dropout(inputs, probability, training=True)
    keep, scale = paired_draw_keep_mask(inputs.shape, 1.0 - probability)
    return inputs * keep.to(inputs.dtype).mul_(scale)


class PairedDrawDropout(torch.nn.Dropout):
    """``torch.nn.Dropout`` whose training-mode masks on a CPU are paired draws."""

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return inputs
        return paired_draw_dropout_function(inputs, self.p)


def paired_draw_attention(
    module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs
):
    """An attention function (``transformers.AttentionInterface``): scaled-dot-product attention,
    with the probabilities' dropout from a paired-draw mask when one is drawn on a CPU.

    Without dropout (evaluation, or a probability of 0) it is PyTorch's scaled-dot-product
    attention, fused kernel included. With dropout on a CPU that kernel computes the attention
    unfused anyway, scores, softmax and mask, which is what this does with a cheaper mask.
    ``attention_mask`` is what ``sdpa_mask`` builds: None, or True where a query may attend.
    """
    if dropout == 0.0 or query.device.type != "cpu":
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    scores = torch.matmul(query, key.transpose(-2, -1)) * scaling
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask
    probabilities = torch.softmax(scores, dim=-1).to(value.dtype)
    output = torch.matmul(paired_draw_dropout_function(probabilities, dropout), value)
    return output.transpose(1, 2).contiguous(), None


@contextlib.contextmanager
def paired_draw_dropout(model: PreTrainedModel) -> Iterator[PreTrainedModel]:
    """Inside the block, ``model``'s dropout on a CPU draws paired-draw masks: its
    ``torch.nn.Dropout`` modules become ``PairedDrawDropout`` and, for a model on
    scaled-dot-product attention, its attention function becomes ``paired_draw_attention``.

    Both are given back on leaving. Neither changes a parameter, a saved file (the attention
    function is not part of the saved configuration) or the model's output without dropout. A
    model on another attention function (eager, FlashAttention) keeps it and its own attention
    dropout; its other dropout modules still draw paired masks."""
    AttentionInterface.register(ATTENTION_NAME, paired_draw_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)
    swapped = [module for module in model.modules() if type(module) is torch.nn.Dropout]
    for module in swapped:
        module.__class__ = PairedDrawDropout
    attention = model.config._attn_implementation
    if attention == "sdpa":
        model.set_attn_implementation(ATTENTION_NAME)
    try:
        yield model
    finally:
        for module in swapped:
            module.__class__ = torch.nn.Dropout
        if attention == "sdpa":
            model.set_attn_implementation(attention)
