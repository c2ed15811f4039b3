"""Attention kernels for batches whose shape changes from step to step.

A catalog batch is padded to its longest text, so nearly every training step and every inference
batch has a shape of its own. On a CUDA GPU, PyTorch's scaled-dot-product attention prefers
cuDNN's kernel on recent chips, and cuDNN builds an execution plan on the host for each new
shape: 3 to 4.5 ms per attention call on an H200, against 0.05 ms for the memory-efficient
kernel, which left the GPU idle most of a MiniLM step (profiles in benchmarks/RESULTS.md). The
other kernels (FlashAttention, memory-efficient, math) need no per-shape plan.

On a CPU the choice is made by dropout: with a dropout probability above 0, scaled-dot-product
attention leaves its fused kernel for the unfused one, which builds each attention matrix, its
softmax and a dropout mask (benchmarks/attention_dropout.py).
"""

from __future__ import annotations

import contextlib

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPE_FREE_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def varying_shape_attention(device: torch.device) -> contextlib.AbstractContextManager:
    """The attention backends for passes over batches of varying shape on ``device``: every
    backend but cuDNN on CUDA (for the forward and, through autograd, its backward); nothing
    changes elsewhere."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    return sdpa_kernel(SHAPE_FREE_BACKENDS)


def leave_attention_dropout_off(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Switch ``model``'s self-attention blocks that are in train mode to eval mode, and return
    them; they stay so until ``model.train()`` (or their own ``train()``) switches them back.

    The attention modules are the self-attention blocks of the BERT family (class names ending in
    ``SelfAttention``), which read their own ``training`` flag to choose the attention dropout;
    their other children hold no dropout. A model without such blocks keeps all of its dropout.
    Left off rather than scoped to a forward pass because gradient checkpointing runs the forward
    again inside the backward pass, which must draw the same (no) attention dropout.
    """
    attention = [
        module
        for module in model.modules()
        if type(module).__name__.endswith("SelfAttention") and module.training
    ]
    for module in attention:
        module.eval()
    return attention


@contextlib.contextmanager
def attention_dropout_off(model: torch.nn.Module):
    """``model`` with dropout left off its attention probabilities, on everywhere else it is on
    (``leave_attention_dropout_off``), for the passes inside the block."""
    attention = leave_attention_dropout_off(model)
    try:
        yield
    finally:
        for module in attention:
            module.train()
