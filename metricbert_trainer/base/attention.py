"""Attention kernels for batches whose shape changes from step to step.

A catalog batch is padded to its longest text, so nearly every training step and every inference
batch has a shape of its own. On a CUDA GPU, PyTorch's scaled-dot-product attention prefers
cuDNN's kernel on recent chips, and cuDNN builds an execution plan on the host for each new
shape: 3 to 4.5 ms per attention call on an H200, against 0.05 ms for the memory-efficient
kernel, which left the GPU idle most of a MiniLM step (profiles in benchmarks/RESULTS.md). The
other kernels (FlashAttention, memory-efficient, math) need no per-shape plan.
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
