"""PyTorch's dropout masks on a CPU, drawn by a compiled kernel, in a BERT-family encoder.

PyTorch draws each element of a CPU dropout mask from the default generator's Mersenne Twister,
one element after the other on one core. Once the matrix products of a step run on AMX tiles,
those draws were the largest cost after the products (the profiles in ``benchmarks/results/`` and
``benchmarks/RESULTS.md``). ``base.bernoulli_masks`` draws the same masks, bit for bit, several times
faster; here they are put into an encoder for the time of a training: into its ``torch.nn.Dropout``
modules and, through an attention function of its own, into the dropout of the attention
probabilities, which PyTorch's scaled-dot-product attention would draw inside its unfused kernel.
That function computes the attention as that kernel computes it (scores from the query and key
each scaled by the square root of the scale, in fp32 for bf16 and fp16 inputs, masked with
``-inf``), so an encoder's outputs and gradients, and the generator's state after them, are those
it has without this module, and activation checkpointing, which restores the generator's state
before it recomputes a forward, draws the same masks again. Off a CPU, and wherever no dropout is
drawn (evaluation, a probability of 0), everything runs as PyTorch runs it.

Other masks were tried before (two elements from each 31-bit draw, ``paired_draw_dropout``): screened
at commit 515e048, where their code is, and removed since these masks cost less and change nothing
(docs/quality.md, "Paired-draw dropout masks").
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from metricbert_trainer.base.bernoulli_masks import scaled_keep_mask


def kernel_mask_dropout(inputs: torch.Tensor, probability: float) -> torch.Tensor:
    """``torch.nn.functional.dropout(inputs, probability, training=True)``, the same output from the
    same draws, as PyTorch computes it on a CPU (a mask ``bernoulli_(1 - p).div_(1 - p)``, then a
    product), with the mask from ``base.bernoulli_masks``."""
    if inputs.device.type != "cpu" or not 0 < probability < 1:
        return torch.nn.functional.dropout(inputs, probability, training=True)
    return inputs * scaled_keep_mask(inputs, 1.0 - probability)


class KernelMaskDropout(torch.nn.Dropout):
    """``torch.nn.Dropout`` whose training-mode masks on a CPU come from the compiled kernel."""

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0 or self.inplace:
            return super().forward(inputs)
        return kernel_mask_dropout(inputs, self.p)


def unfused_attention(
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
    attention, with the probabilities' dropout from the compiled kernel when one is drawn on a CPU.

    There PyTorch computes the attention unfused, and this computes it the same way: under CPU
    autocast the inputs in its dtype (as autocast gives them to that kernel) and autocast off inside;
    bf16 and fp16 raised to fp32; the scores from the query and the key each scaled by the square
    root of the scale; ``-inf`` where a query may not attend; softmax (zeros for a query that may attend
    to no key, as PyTorch's safe softmax gives), dropout, the product with the values, and the result in
    the inputs' dtype. Everything else (no dropout, another device, a
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
    unattending = None  # query rows that may attend to no key, for which PyTorch's softmax gives zeros
    with torch.autocast("cpu", enabled=False):
        scores = (query.to(computed_in) * root_scale) @ (key.to(computed_in) * root_scale).transpose(-2, -1)
        if attention_mask is not None:
            if attention_mask.dtype == torch.bool:
                scores = scores.masked_fill(~attention_mask, float("-inf"))
                unattending = ~attention_mask.any(dim=-1, keepdim=True)
            else:
                scores = scores + attention_mask.to(computed_in)
        probabilities = torch.softmax(scores, dim=-1)
        if unattending is not None:  # always, as PyTorch's safe softmax does: no read of the mask on the host
            probabilities = probabilities.masked_fill(unattending, 0.0)
        probabilities = kernel_mask_dropout(probabilities, dropout)
        output = (probabilities @ value.to(computed_in)).to(dtype)
    return output.transpose(1, 2).contiguous(), None


ATTENTION_NAME = "metricbert_kernel_mask_sdpa"


@contextlib.contextmanager
def kernel_dropout_masks(model: PreTrainedModel) -> Iterator[PreTrainedModel]:
    """Inside the block, ``model``'s dropout on a CPU draws its masks from the compiled kernel: its
    ``torch.nn.Dropout`` modules become ``KernelMaskDropout`` and, for a model on scaled-dot-product
    attention, its attention function becomes ``unfused_attention``.

    Both are given back on leaving. Neither changes a parameter, a saved file (the attention
    function is not part of the saved configuration) or the model's output. A model on another
    attention function (eager, FlashAttention) keeps it and its own attention dropout; its other
    dropout modules still draw from the kernel. Inside a block of its own (a trainer's warm-up
    around its training) it changes nothing."""
    AttentionInterface.register(ATTENTION_NAME, unfused_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)
    swapped = [module for module in model.modules() if type(module) is torch.nn.Dropout]
    for module in swapped:
        module.__class__ = KernelMaskDropout
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
