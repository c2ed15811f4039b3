"""MetricBERT's triplet objective over in-batch mined negatives."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .distances import Distance, pairwise_distance
from .mining import (
    Anchors,
    Mining,
    NegativePool,
    anchor_and_positive_indices,
    mine_negatives,
    negative_candidates,
)


@dataclass
class LossOutput:
    """The loss, the statistics worth logging next to it (plain floats, already detached), and
    the mined triplets as element indices (for diagnostics)."""

    loss: torch.Tensor
    statistics: dict[str, float]
    anchor_index: torch.Tensor
    positive_index: torch.Tensor
    negative_index: torch.Tensor


class TripletLoss(nn.Module):
    """``L_T = mean over anchors of max(0, m + d(a, p) - d(a, n))`` (MetricBERT eq. 2).

    The inputs are the pooled embeddings of a batch's two fields, each [B, H], row ``i`` of both
    belonging to item ``i``. The anchor is one field of an item, the positive its other field, and
    the negative is mined among the other elements of the batch (``mining``, ``negative_pool``).
    ``d`` is the angular distance ``arccos(cos(u, v)) / pi`` by default.

    Reference: Malkiel, Ginzburg, Barkan, Caciularu, Weill, Koenigstein, "MetricBERT: Text
    Representation Learning via Self-Supervised Triplet Training", ICASSP 2022.

    Example:
        >>> loss = TripletLoss(margin=0.1)
        >>> output = loss(torch.randn(4, 8), torch.randn(4, 8))
        >>> output.loss.backward()
    """

    def __init__(
        self,
        margin: float = 0.1,
        distance: Distance | str = Distance.ANGULAR,
        mining: Mining | str = Mining.HARD,
        anchors: Anchors | str = Anchors.BOTH,
        negative_pool: NegativePool | str = NegativePool.ALL,
    ) -> None:
        super().__init__()
        if margin < 0:
            raise ValueError(f"margin must be >= 0; got {margin}.")
        self.margin = margin
        self.distance = Distance(distance)
        self.mining = Mining(mining)
        self.anchors = Anchors(anchors)
        self.negative_pool = NegativePool(negative_pool)

    def get_config_dict(self) -> dict[str, object]:
        return {
            "objective": "triplet",
            "margin": self.margin,
            "distance": self.distance.value,
            "mining": self.mining.value,
            "anchors": self.anchors.value,
            "negative_pool": self.negative_pool.value,
        }

    def anchors_and_positives(
        self, num_items: int, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        anchor_index, positive_index = anchor_and_positive_indices(num_items, self.anchors)
        return anchor_index.to(device), positive_index.to(device)

    def forward(
        self, titles: torch.Tensor, descriptions: torch.Tensor, excluded: torch.Tensor | None = None
    ) -> LossOutput:
        """``excluded`` ([A, 2B], optional) removes candidates from mining, e.g. suspected false
        negatives; anchors left with no candidate do not contribute to the loss."""
        elements = torch.cat([titles, descriptions])
        anchor_index, positive_index = self.anchors_and_positives(titles.shape[0], elements.device)
        allowed = negative_candidates(anchor_index, positive_index, len(elements), self.negative_pool)
        if excluded is not None:
            allowed &= ~excluded
            keep = allowed.any(dim=1)
            anchor_index, positive_index, allowed = anchor_index[keep], positive_index[keep], allowed[keep]
        if len(anchor_index) == 0:
            zero = elements.sum() * 0.0
            return LossOutput(zero, {}, anchor_index, positive_index, anchor_index)
        distances = pairwise_distance(elements[anchor_index], elements, self.distance)
        rows = torch.arange(len(anchor_index), device=elements.device)
        positive_distance = distances[rows, positive_index]
        negative_index = mine_negatives(distances, allowed, positive_distance, self.mining)
        negative_distance = distances[rows, negative_index]
        loss = F.relu(self.margin + positive_distance - negative_distance).mean()
        statistics = triplet_statistics(positive_distance, negative_distance, self.margin)
        return LossOutput(loss, statistics, anchor_index, positive_index, negative_index)


def triplet_statistics(
    positive_distance: torch.Tensor, negative_distance: torch.Tensor, margin: float
) -> dict[str, float]:
    """What tells a healthy run from a collapsing one: the margin violations, the share of
    negatives mined closer than the positive, and the mean distances on both sides."""
    positive_distance, negative_distance = positive_distance.detach(), negative_distance.detach()
    return {
        "margin_violation_rate": float((positive_distance + margin > negative_distance).float().mean()),
        "negative_closer_rate": float((negative_distance < positive_distance).float().mean()),
        "mean_d_ap": float(positive_distance.mean()),
        "mean_d_an": float(negative_distance.mean()),
    }


def embedding_spread(embeddings: torch.Tensor) -> float:
    """The mean angular distance between distinct elements of a batch: near 0 means collapse."""
    with torch.no_grad():
        distances = pairwise_distance(embeddings, embeddings, Distance.ANGULAR)
        count = distances.shape[0]
        if count < 2:
            return 0.0
        return float((distances.sum() - distances.diagonal().sum()) / (count * (count - 1)))
