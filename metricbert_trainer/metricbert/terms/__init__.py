"""MetricBERT's loss, composed of terms: ``L = triplet_weight * L_T + mlm_weight * L_MLM
+ distill_weight * L_distill + teacher_weight * L_teacher``, each term a module of its own
(``metric``, ``mlm``, ``guard``, ``teacher``) that turns one step's vectors (``StepVectors``) into
its weighted share and its logged statistics."""

from __future__ import annotations

from metricbert_trainer.metricbert.losses import InBatchLoss
from metricbert_trainer.metricbert.terms.guard import GuardTerm
from metricbert_trainer.metricbert.terms.metric import MetricTerm
from metricbert_trainer.metricbert.terms.mlm import MlmTerm
from metricbert_trainer.metricbert.terms.step import LossTerm, StepVectors, TermValue
from metricbert_trainer.metricbert.terms.teacher import TeacherParts, TeacherTerm

__all__ = [
    "GuardTerm",
    "LossTerm",
    "MetricTerm",
    "MlmTerm",
    "StepVectors",
    "TeacherParts",
    "TeacherTerm",
    "TermValue",
    "build_terms",
]


def build_terms(args, metric_loss: InBatchLoss, teacher_parts: TeacherParts) -> tuple[LossTerm, ...]:
    """The terms a ``MetricBertConfig`` trains with, in the order their shares are summed: the
    metric term and the MLM term always (the MLM loss is logged at weight 0 too), the guard and
    the teacher where their weights are above 0."""
    terms: list[LossTerm] = [
        MetricTerm(metric_loss, args.triplet_weight),
        MlmTerm(args.mlm_weight, args.mlm_weight_ramp_steps),
    ]
    if args.distill_weight > 0:
        terms.append(GuardTerm.from_config(args))
    if args.teacher_weight > 0:
        terms.append(TeacherTerm.from_config(args, teacher_parts))
    return tuple(terms)
