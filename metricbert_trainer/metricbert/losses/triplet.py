"""MetricBERT's triplet objective."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from metricbert_trainer.metricbert.losses.base import InBatchLoss, MinedBatch


class TripletLoss(InBatchLoss):
    """``L_T = mean over anchors of max(0, m + d(a, p) - d(a, n))`` (MetricBERT eq. 2).

    The anchor is one field of an item, the positive its other field, and the negative is mined
    among the other elements of the batch (``mining``, ``negative_pool``). ``d`` is the angular
    distance ``arccos(cos(u, v)) / pi`` by default; ``cosine`` (``1 - cos``) is the paper's
    ablation (iv) and ``euclidean`` the siamese/triplet SBERT networks' choice.

    Reference: Malkiel, Ginzburg, Barkan, Caciularu, Weill, Koenigstein, "MetricBERT: Text
    Representation Learning via Self-Supervised Triplet Training", ICASSP 2022.

    Example:
        >>> loss = TripletLoss(margin=0.1)
        >>> output = loss(torch.randn(4, 8), torch.randn(4, 8))
        >>> output.loss.backward()
    """

    name = "triplet"

    def __init__(
        self,
        margin: float = 0.1,
        **mining_options,
    ) -> None:
        super().__init__(**mining_options)
        if margin < 0:
            raise ValueError(f"margin must be >= 0; got {margin}.")
        self.margin = margin

    def get_config_dict(self) -> dict[str, object]:
        return {**super().get_config_dict(), "margin": self.margin}

    def anchor_losses(self, batch: MinedBatch) -> torch.Tensor:
        return F.relu(self.margin + batch.positive_distance - batch.negative_distance)

    def objective_statistics(self, batch: MinedBatch) -> dict[str, torch.Tensor]:
        violated = batch.positive_distance.detach() + self.margin > batch.negative_distance.detach()
        return {"margin_violation_rate": violated.float().mean()}
