"""The loss family: MetricBERT's triplet and the objectives it is compared with.

Every objective mines the same batch (``base.InBatchLoss``); ``Objective`` names them as configs
spell them and ``build_loss`` turns a trainer configuration into one.
"""

from __future__ import annotations

from enum import Enum

from metricbert_trainer.metricbert.guide import StartingModelGuide
from metricbert_trainer.metricbert.losses.base import (
    InBatchLoss,
    LossOutput,
    MinedBatch,
    embedding_spread,
    mining_statistics,
)
from metricbert_trainer.metricbert.losses.contrastive import ContrastiveLoss, CosineLoss
from metricbert_trainer.metricbert.losses.ranking import LogisticTripletLoss, MultipleNegativesRankingLoss
from metricbert_trainer.metricbert.losses.triplet import TripletLoss


class Objective(str, Enum):
    """``triplet`` (MetricBERT), ``contrastive`` and ``cosine`` (the paper's ablations (ii) and
    (iii)), ``mnrl`` (in-batch softmax, as SBERT trains) and ``logistic_triplet`` (BPR)."""

    TRIPLET = "triplet"
    CONTRASTIVE = "contrastive"
    COSINE = "cosine"
    MNRL = "mnrl"
    LOGISTIC_TRIPLET = "logistic_triplet"


# The loss class of each objective; every one takes the mining options as keywords.
LOSS_TYPES: dict[Objective, type[InBatchLoss]] = {
    Objective.TRIPLET: TripletLoss,
    Objective.CONTRASTIVE: ContrastiveLoss,
    Objective.COSINE: CosineLoss,
    Objective.MNRL: MultipleNegativesRankingLoss,
    Objective.LOGISTIC_TRIPLET: LogisticTripletLoss,
}


def build_loss(config, guide: StartingModelGuide | None = None) -> InBatchLoss:
    """The loss a ``MetricBertConfig`` describes; with ``false_negative_filter`` it holds ``guide``
    (without one, as when a configuration is only checked, it filters nothing)."""
    objective = Objective(config.objective)
    filtering = config.false_negative_filter and guide is not None
    shared = {
        "distance": config.distance,
        "mining": config.mining,
        "anchors": config.anchors,
        "negative_pool": config.negative_pool,
        "guide": guide if filtering else None,
        "false_negative_margin": config.false_negative_margin if filtering else 0.0,
    }
    own = {
        Objective.TRIPLET: {"margin": config.margin},
        Objective.CONTRASTIVE: {
            "positive_margin": config.positive_margin,
            "negative_margin": config.negative_margin,
        },
        Objective.COSINE: {
            "positive_margin": config.positive_margin,
            "negative_margin": config.negative_margin,
        },
        Objective.MNRL: {"scale": config.scale},
    }.get(objective, {})
    return LOSS_TYPES[objective](**own, **shared)


__all__ = [
    "LOSS_TYPES",
    "ContrastiveLoss",
    "CosineLoss",
    "InBatchLoss",
    "LogisticTripletLoss",
    "LossOutput",
    "MinedBatch",
    "MultipleNegativesRankingLoss",
    "Objective",
    "TripletLoss",
    "build_loss",
    "embedding_spread",
    "mining_statistics",
]
