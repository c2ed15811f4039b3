"""The metric term: the in-batch loss (triplet by default) on the titles and descriptions."""

from __future__ import annotations

from metricbert_trainer.metricbert.guide import StartingModelGuide
from metricbert_trainer.metricbert.losses import InBatchLoss
from metricbert_trainer.metricbert.terms.step import StepVectors, TermValue


class MetricTerm:
    """``triplet_weight * L_T`` (or the configured objective's), with the loss's mining statistics.

    When the guide's vectors are at hand it also logs ``guide_negative_closer_rate``: how often
    the frozen start ranks a mined negative above the positive, the false negatives the filter
    would catch.
    """

    def __init__(self, loss: InBatchLoss, weight: float) -> None:
        self.loss = loss
        self.weight = weight
        self.name = loss.name

    def __call__(self, step: StepVectors) -> TermValue:
        metric = self.loss(step.titles, step.descriptions, shard=step.shard, guide_vectors=step.guide_vectors)
        statistics = {f"{self.name}_loss": metric.loss.detach(), **metric.statistics}
        if step.guide_vectors is not None and len(metric.anchor_index):
            statistics["guide_negative_closer_rate"] = StartingModelGuide.negative_closer_rate(
                step.guide_vectors, metric.anchor_index, metric.positive_index, metric.negative_index
            )
        return TermValue(self.weight * metric.loss, statistics)
