"""Mean pooling of token embeddings, the sentence vector MetricBERT trains and ranks with."""

from __future__ import annotations

import torch


def mean_pool(token_embeddings: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Averages ``token_embeddings`` [B, L, H] over the positions where ``attention_mask`` is 1.

    Padding never contributes, so an item embeds the same whatever it is batched with; an
    all-padding row (which the collator never produces) gives zeros rather than NaN.
    """
    weights = attention_mask.unsqueeze(-1).to(token_embeddings.dtype)
    summed = (token_embeddings * weights).sum(dim=1)
    counts = weights.sum(dim=1).clamp(min=1.0)
    return summed / counts
