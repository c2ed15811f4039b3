"""Distances between embeddings, shared by the losses, the miners and the ranking code.

MetricBERT measures similarity with the angular distance ``d(u, v) = arccos(cos(u, v)) / pi``
(paper eq. 3): it lies in [0, 1] and, unlike ``1 - cos``, its gradient does not vanish as two
vectors align (paper eqs. 5-6), so hard positives keep pulling. ``cosine`` and ``euclidean`` are
kept for the ablations of the loss-family study.
"""

from __future__ import annotations

from enum import Enum

import torch
import torch.nn.functional as F

# Keeps arccos away from |cos| = 1, where its derivative -1/sqrt(1 - c^2) is infinite. With
# 1e-6 the largest gradient is about 700, which float32 and bf16 autocast both carry.
COSINE_CLAMP = 1.0 - 1e-6


class Distance(str, Enum):
    """Names accepted by the ``distance`` option; the value is what configs spell."""

    ANGULAR = "angular"
    COSINE = "cosine"
    EUCLIDEAN = "euclidean"


def cosine_matrix(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """[len(x), len(y)] cosine similarities, in float32 even under autocast."""
    # float32 whatever the autocast dtype: in bf16 a cosine above 0.998 rounds to 1.0, where arccos
    # has an infinite slope; each anchor's cosine with itself is there, and its zero gradient times
    # that slope made the backward NaN. Autocast would run the product in bf16 even on float32
    # inputs, so it is switched off here.
    with torch.autocast(x.device.type, enabled=False):
        x = F.normalize(x.float(), dim=-1, eps=1e-12)
        y = F.normalize(y.float(), dim=-1, eps=1e-12)
        return x @ y.T


def paired_cosine(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """[N] cosine similarities of matching rows of ``x`` and ``y`` (both [N, H]), in float32; a
    zero vector has cosine 0 with everything."""
    x = F.normalize(x.float(), dim=-1, eps=1e-12)
    y = F.normalize(y.float(), dim=-1, eps=1e-12)
    return (x * y).sum(dim=-1)


def cosine_to_distance(cosine: torch.Tensor, distance: Distance | str) -> torch.Tensor:
    """Turns cosine similarities into the chosen cosine-based distance."""
    distance = Distance(distance)
    if distance is Distance.ANGULAR:
        # In float32: COSINE_CLAMP rounds to 1.0 in bf16 and fp16, which would leave arccos's
        # infinite slope in reach.
        return torch.arccos(cosine.float().clamp(-COSINE_CLAMP, COSINE_CLAMP)) / torch.pi
    if distance is Distance.COSINE:
        return 1.0 - cosine
    raise ValueError(f"{distance.value} is not a function of the cosine alone")


def pairwise_distance(x: torch.Tensor, y: torch.Tensor, distance: Distance | str) -> torch.Tensor:
    """Distances between every row of ``x`` [N, H] and every row of ``y`` [M, H], as [N, M]."""
    distance = Distance(distance)
    if distance is Distance.EUCLIDEAN:
        return _safe_euclidean(x.float().unsqueeze(1) - y.float().unsqueeze(0))
    return cosine_to_distance(cosine_matrix(x, y), distance)


def paired_distance(x: torch.Tensor, y: torch.Tensor, distance: Distance | str) -> torch.Tensor:
    """Distances between matching rows of ``x`` and ``y`` (both [N, H]), as [N]."""
    distance = Distance(distance)
    if distance is Distance.EUCLIDEAN:
        return _safe_euclidean(x.float() - y.float())
    return cosine_to_distance(paired_cosine(x, y), distance)


def _safe_euclidean(difference: torch.Tensor) -> torch.Tensor:
    """The norm of each row of ``difference``, with a finite gradient wherever float32 holds the norm.

    Squares overflow float32 above about 1e19 (and underflow below 1e-19): the distances became
    inf and the triplet loss inf - inf = NaN. Dividing each row by its largest entry first, as
    ``hypot`` does, keeps the squares in [0, H]; the scale is detached, which leaves the gradient
    ``difference / norm`` unchanged. sqrt has an infinite derivative at 0 (identical vectors);
    the epsilon keeps it finite.
    """
    scale = difference.detach().abs().amax(dim=-1, keepdim=True).clamp_min(torch.finfo(difference.dtype).tiny)
    scaled = difference / scale
    return scale.squeeze(-1) * torch.sqrt((scaled * scaled).sum(dim=-1) + 1e-12)
