"""Pairwise margin losses on cosine similarities: the paper's ablations (ii) and (iii)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from metricbert_trainer.base.distances import paired_cosine
from metricbert_trainer.metricbert.losses.base import InBatchLoss, MinedBatch


class ContrastiveLoss(InBatchLoss):
    """``L = mean over anchors of [m_pos - s(a, p)]_+ + [s(a, n) - m_neg]_+``, ``s`` the cosine.

    Each anchor contributes a positive pair, pulled until its cosine reaches ``m_pos``, and a
    negative pair (the mined negative), pushed until its cosine falls to ``m_neg``. Unlike the
    triplet loss, the two pairs are penalised independently: there is no relative margin.

    ``contrastive`` is ``m_pos = 1, m_neg = 0`` (MetricBERT's ablation (ii), after Hadsell,
    Chopra, LeCun, "Dimensionality Reduction by Learning an Invariant Mapping", CVPR 2006).
    """

    name = "contrastive"
    default_negative_margin = 0.0

    def __init__(
        self,
        positive_margin: float = 1.0,
        negative_margin: float | None = None,
        **mining_options,
    ) -> None:
        super().__init__(**mining_options)
        negative_margin = self.default_negative_margin if negative_margin is None else negative_margin
        if not -1.0 <= negative_margin < positive_margin <= 1.0:
            raise ValueError(
                "Cosine margins need -1 <= negative_margin < positive_margin <= 1; "
                f"got negative_margin={negative_margin}, positive_margin={positive_margin}."
            )
        self.positive_margin = positive_margin
        self.negative_margin = negative_margin

    def get_config_dict(self) -> dict[str, object]:
        return {
            **super().get_config_dict(),
            "positive_margin": self.positive_margin,
            "negative_margin": self.negative_margin,
        }

    def anchor_losses(self, batch: MinedBatch) -> torch.Tensor:
        anchors = batch.elements[batch.anchor_index]
        positive = paired_cosine(anchors, batch.elements[batch.positive_index])
        negative = paired_cosine(anchors, batch.elements[batch.negative_index])
        return F.relu(self.positive_margin - positive) + F.relu(negative - self.negative_margin)


class CosineLoss(ContrastiveLoss):
    """The contrastive loss with ``m_neg = -1`` (MetricBERT's ablation (iii), the "cosine loss"):
    every negative pair is pushed towards opposite directions, never released.

    While every mined negative has a cosine >= 0 the negative hinges of both losses are active
    and their gradients are identical; the values then differ by the constant ``0 - (-1) = 1``
    per anchor, which no optimiser sees. They part only once some negative cosine drops below 0.
    """

    name = "cosine"
    default_negative_margin = -1.0
