"""The guard: relational distillation towards the frozen start (``distill_weight``)."""

from __future__ import annotations

import torch

from metricbert_trainer.metricbert.losses.distillation import (
    DistillWeighting,
    guide_positive_confidence,
    relational_distillation,
)
from metricbert_trainer.metricbert.terms.step import StepVectors, TermValue


class GuardTerm:
    """``distill_weight * L_distill``: each element's distribution over the batch, as the student
    sees it, pulled towards the frozen start's, so that what the start already ranks well is not
    unlearned. With ``DistillWeighting.GUIDE_CONFIDENCE`` each anchor counts by how sure the
    start is of its own positive (to the power ``confidence_power``)."""

    name = "distill"

    def __init__(
        self,
        weight: float,
        *,
        temperature: float,
        include_positive: bool,
        within_field: bool,
        weighting: DistillWeighting = DistillWeighting.UNIFORM,
        confidence_power: float = 1.0,
    ) -> None:
        self.weight = weight
        self.temperature = temperature
        self.include_positive = include_positive
        self.within_field = within_field
        self.weighting = weighting
        self.confidence_power = confidence_power

    @classmethod
    def from_config(cls, args) -> GuardTerm:
        """The guard a ``MetricBertConfig`` configures."""
        return cls(
            args.distill_weight,
            temperature=args.distill_temperature,
            include_positive=args.distill_include_positive,
            within_field=args.distill_within_field,
            weighting=args.distill_weighting,
            confidence_power=args.distill_confidence_power,
        )

    def __call__(self, step: StepVectors) -> TermValue:
        statistics = {}
        anchor_weights = None
        if self.weighting == DistillWeighting.GUIDE_CONFIDENCE:
            anchor_weights = guide_positive_confidence(step.guide_vectors, temperature=self.temperature).pow(
                self.confidence_power
            )
            statistics["distill_anchor_weight"] = anchor_weights.mean()
        loss = relational_distillation(
            torch.cat([step.titles, step.descriptions]),
            step.guide_vectors,
            temperature=self.temperature,
            include_positive=self.include_positive,
            within_field=self.within_field,
            anchor_weights=anchor_weights,
            shard=step.shard,
        )
        statistics["distill_loss"] = loss.detach()
        return TermValue(self.weight * loss, statistics)
