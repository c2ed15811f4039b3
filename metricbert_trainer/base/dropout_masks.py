"""Dropout masks on a CPU drawn faster: PyTorch's own masks from a compiled kernel, or other masks
from half the random numbers.

PyTorch draws each element of a CPU dropout mask from the default generator's Mersenne Twister,
one element after the other on one core. Once the matrix products of a step run on AMX tiles,
those draws are the largest cost after the products (the profiles in ``benchmarks/results/`` and
``benchmarks/RESULTS.md``). Two ways around it are put into a BERT-family encoder here, for the time
of a training, through its ``torch.nn.Dropout`` modules and, through an attention function of its
own, the dropout of the attention probabilities, which PyTorch's scaled-dot-product attention would
draw inside its unfused kernel:

- ``"exact"``: the masks ``bernoulli_`` draws, bit for bit, from ``base.bernoulli_masks``; the
  attention computed as that unfused kernel computes it (scores from the query and key each scaled
  by the square root of the scale, in fp32 for bf16 and fp16 inputs, masked with ``-inf``), so an
  encoder's outputs and gradients, and the generator's state after them, are those it has without
  this module. The default of every trainer on a CPU.
- ``"paired"``: each 31-bit draw of ``random_`` on int32 gives two 15-bit numbers, and an element is
  kept when its number is below ``round(keep * 2**15)``: the keep rate is that threshold over 2**15
  (0.899994 for BERT's 0.9) and the kept elements are scaled by its inverse. Other masks than
  ``bernoulli_`` draws for the same seed (the ``paired_draw_dropout`` option; its quality screen in
  docs/quality.md).

Both draw from the global generator, so a seed still fixes a run and activation checkpointing,
which restores the generator's state before it recomputes a forward, draws the same masks again.
Off a CPU, and wherever no dropout is drawn (evaluation, a probability of 0), everything runs as
PyTorch runs it.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator

import torch
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from metricbert_trainer.base.bernoulli_masks import scaled_keep_mask

FIELD_BITS = 15
MASK_SOURCES = ("exact", "paired")


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


def exact_draw_dropout_function(inputs: torch.Tensor, probability: float) -> torch.Tensor:
    """``torch.nn.functional.dropout(inputs, probability, training=True)``, the same output from the
    same draws, as PyTorch computes it on a CPU (a mask ``bernoulli_(1 - p).div_(1 - p)``, then a
    product), with the mask from ``base.bernoulli_masks``."""
    if inputs.device.type != "cpu" or not 0 < probability < 1:
        return torch.nn.functional.dropout(inputs, probability, training=True)
    return inputs * scaled_keep_mask(inputs, 1.0 - probability)


DROPOUT_FUNCTIONS: dict[str, Callable[[torch.Tensor, float], torch.Tensor]] = {
    "exact": exact_draw_dropout_function,
    "paired": paired_draw_dropout_function,
}


class DrawnMaskDropout(torch.nn.Dropout):
    """``torch.nn.Dropout`` whose training-mode masks on a CPU come from ``dropout_function``."""

    dropout_function: Callable[[torch.Tensor, float], torch.Tensor]

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0 or self.inplace:
            return super().forward(inputs)
        return type(self).dropout_function(inputs, self.p)


class ExactDrawDropout(DrawnMaskDropout):
    dropout_function = staticmethod(exact_draw_dropout_function)


class PairedDrawDropout(DrawnMaskDropout):
    dropout_function = staticmethod(paired_draw_dropout_function)


DROPOUT_CLASSES: dict[str, type[DrawnMaskDropout]] = {"exact": ExactDrawDropout, "paired": PairedDrawDropout}


def unfused_attention(
    dropout_function: Callable[[torch.Tensor, float], torch.Tensor],
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
):
    """An attention function (``transformers.AttentionInterface``): PyTorch's scaled-dot-product
    attention, with the probabilities' dropout from ``dropout_function`` when one is drawn on a CPU.

    There PyTorch computes the attention unfused, and this computes it the same way: under CPU
    autocast the inputs in its dtype (as autocast gives them to that kernel) and autocast off inside;
    bf16 and fp16 raised to fp32; the scores from the query and the key each scaled by the square
    root of the scale; ``-inf`` where a query may not attend; softmax, dropout, the product with the
    values, and the result in the inputs' dtype. Everything else (no dropout, another device, a
    causal or grouped-query module, a position bias, a cache) is PyTorch's scaled-dot-product
    attention through transformers, fused kernel included. ``attention_mask`` is what ``sdpa_mask``
    builds: None, or True where a query may attend."""
    causal = kwargs.get("is_causal")
    causal = getattr(module, "is_causal", True) if causal is None else causal
    unfused = (
        dropout > 0
        and query.device.type == "cpu"
        and not (causal and attention_mask is None and query.shape[2] > 1)
        and getattr(module, "num_key_value_groups", 1) == 1
        and all(kwargs.get(name) is None for name in ("position_bias", "cache", "softcap"))
    )
    if not unfused:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    if torch.is_autocast_enabled("cpu"):
        dtype = torch.get_autocast_dtype("cpu")
        query, key, value = (tensor.to(dtype) for tensor in (query, key, value))
    dtype = query.dtype
    computed_in = torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype
    root_scale = math.sqrt(query.shape[-1] ** -0.5 if scaling is None else scaling)
    with torch.autocast("cpu", enabled=False):
        scores = (query.to(computed_in) * root_scale) @ (key.to(computed_in) * root_scale).transpose(-2, -1)
        if attention_mask is not None:
            if attention_mask.dtype == torch.bool:
                scores = scores.masked_fill(~attention_mask, float("-inf"))
            else:
                scores = scores + attention_mask.to(computed_in)
        probabilities = dropout_function(torch.softmax(scores, dim=-1), dropout)
        output = (probabilities @ value.to(computed_in)).to(dtype)
    return output.transpose(1, 2).contiguous(), None


def attention_name(source: str) -> str:
    """The name the attention function drawing ``source`` masks is registered under."""
    return f"metricbert_{source}_draw_sdpa"


@contextlib.contextmanager
def drawn_dropout_masks(model: PreTrainedModel, source: str = "exact") -> Iterator[PreTrainedModel]:
    """Inside the block, ``model``'s dropout on a CPU draws ``source`` masks (``MASK_SOURCES``): its
    ``torch.nn.Dropout`` modules take the class that draws them and, for a model on scaled-dot-product
    attention, its attention function becomes ``unfused_attention`` drawing them.

    Both are given back on leaving. Neither changes a parameter, a saved file (the attention
    function is not part of the saved configuration) or the model's output without dropout. A
    model on another attention function (eager, FlashAttention) keeps it and its own attention
    dropout; its other dropout modules still draw the masks. Inside a block of its own (a trainer's
    warm-up around its training) it changes nothing."""
    if source not in MASK_SOURCES:
        raise ValueError(f"source must be one of {MASK_SOURCES}; got {source!r}.")
    name = attention_name(source)
    AttentionInterface.register(name, functools.partial(unfused_attention, DROPOUT_FUNCTIONS[source]))
    AttentionMaskInterface.register(name, sdpa_mask)
    swapped = [module for module in model.modules() if type(module) is torch.nn.Dropout]
    for module in swapped:
        module.__class__ = DROPOUT_CLASSES[source]
    attention = model.config._attn_implementation
    if attention == "sdpa":
        model.set_attn_implementation(name)
    try:
        yield model
    finally:
        for module in swapped:
            module.__class__ = torch.nn.Dropout
        if attention == "sdpa":
            model.set_attn_implementation(attention)
