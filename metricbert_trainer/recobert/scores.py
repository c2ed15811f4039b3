"""RecoBERT's title-description matching score and loss, and the z-normalisation of its inference.

``C_TDM(t, d) = (1 + cos(F^t, F^d)) / 2`` maps the cosine of a title's and a description's
mean-pooled vectors (taken from their joint encoding) into [0, 1], read as the probability that
the two describe the same item; training fits it to the match labels with binary cross-entropy
(Malkiel et al., "RecoBERT", Findings of EMNLP 2020, eq. 1-2). At inference the four scores of a
(seed, candidate) pair live on different scales (cosines between two items' vectors, matching
probabilities of cross pairs), so each is z-normalised over the seed's candidates before the
weighted sum.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

# C_TDM is clamped this far from 0 and 1 before the log of the cross-entropy, so a pair whose
# vectors point exactly apart (or together) gives a large, finite loss instead of infinity.
SCORE_EPSILON = 1e-6


def tdm_score(titles: torch.Tensor, descriptions: torch.Tensor) -> torch.Tensor:
    """``C_TDM = (1 + cos(F^t, F^d)) / 2`` per row of ``[B, H]`` title and description vectors.

    Example:
        >>> tdm_score(torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]]))
        tensor([0.5000])
    """
    return (1.0 + F.cosine_similarity(titles, descriptions, dim=-1, eps=1e-12)) / 2.0


def tdm_loss(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean binary cross-entropy between ``C_TDM`` scores in [0, 1] and match labels (1 or 0)."""
    clamped = scores.float().clamp(SCORE_EPSILON, 1.0 - SCORE_EPSILON)
    return F.binary_cross_entropy(clamped, labels.to(clamped.dtype))


def z_normalise(scores: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """``(x - mean) / std`` per row over the entries where ``valid`` is True; 0 elsewhere.

    A row whose valid entries are all equal (or that has fewer than two) normalises to zeros: the
    score then says nothing about that seed's candidates, and adds nothing to their sum.
    """
    scores = np.asarray(scores, dtype=np.float64)
    valid = np.asarray(valid, dtype=bool)
    if scores.shape != valid.shape:
        raise ValueError(f"scores {scores.shape} and valid {valid.shape} must have the same shape.")
    counts = valid.sum(axis=-1, keepdims=True)
    safe = np.where(valid, scores, 0.0)
    mean = safe.sum(axis=-1, keepdims=True) / np.maximum(counts, 1)
    centred = np.where(valid, scores - mean, 0.0)
    std = np.sqrt((centred**2).sum(axis=-1, keepdims=True) / np.maximum(counts, 1))
    spread = (std > 1e-12) & (counts > 1)
    return np.where(valid & spread, centred / np.where(spread, std, 1.0), 0.0)
