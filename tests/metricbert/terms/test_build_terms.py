"""Which terms a configuration trains with, and in which order their shares are summed."""

from conftest import bare_config

from metricbert_trainer.metricbert.config import MetricBertConfig
from metricbert_trainer.metricbert.losses import build_loss
from metricbert_trainer.metricbert.terms import (
    GuardTerm,
    MetricTerm,
    MlmTerm,
    TeacherParts,
    TeacherTerm,
    build_terms,
)


def _kinds(args) -> list[type]:
    return [type(term) for term in build_terms(args, build_loss(args), TeacherParts())]


def test_the_recipe_trains_all_four_terms_and_a_term_at_weight_0_is_left_out():
    assert _kinds(MetricBertConfig()) == [MetricTerm, MlmTerm, GuardTerm, TeacherTerm]
    # The MLM term stays at weight 0: it still logs the MLM loss, and adds nothing.
    assert _kinds(bare_config(distill_weight=0.0)) == [MetricTerm, MlmTerm]
    assert _kinds(bare_config(distill_weight=1.0, teacher_weight=1.0)) == [
        MetricTerm,
        MlmTerm,
        GuardTerm,
        TeacherTerm,
    ]


def test_the_terms_carry_the_configured_weights():
    args = bare_config(
        triplet_weight=0.7,
        mlm_weight=0.3,
        mlm_probability=0.15,
        mlm_weight_ramp_steps=5,
        distill_weight=0.2,
        teacher_weight=0.4,
    )
    parts = TeacherParts()
    metric, mlm, guard, teacher = build_terms(args, build_loss(args), parts)
    assert (metric.weight, mlm.weight, mlm.ramp_steps, guard.weight, teacher.weight) == (
        0.7,
        0.3,
        5,
        0.2,
        0.4,
    )
    assert teacher.parts is parts  # what set-up prepares before the first step, the term reads
    assert [term.name for term in (mlm, guard, teacher)] == ["mlm", "distill", "teacher"]
