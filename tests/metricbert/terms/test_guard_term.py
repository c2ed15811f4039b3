"""The guard: relational distillation towards the frozen start, weighted, its anchors optionally
counted by the start's confidence."""

import pytest
import torch
from conftest import bare_config

from metricbert_trainer.metricbert.losses.distillation import DistillWeighting, relational_distillation
from metricbert_trainer.metricbert.terms import GuardTerm, StepVectors


def _step(seed: int = 0) -> StepVectors:
    generator = torch.Generator().manual_seed(seed)
    titles, descriptions = torch.randn(2, 6, 8, generator=generator)
    guide = torch.randn(12, 8, generator=generator)
    return StepVectors({}, {}, titles, descriptions, ("title", "description"), guide_vectors=guide)


def test_the_share_is_the_weighted_relational_distillation_of_the_configured_guard():
    args = bare_config(distill_weight=0.5, distill_temperature=0.1, distill_weighting="uniform")
    step = _step()
    value = GuardTerm.from_config(args)(step)
    expected = relational_distillation(
        torch.cat([step.titles, step.descriptions]),
        step.guide_vectors,
        temperature=0.1,
        include_positive=args.distill_include_positive,
        within_field=args.distill_within_field,
    )
    torch.testing.assert_close(value.loss, 0.5 * expected)
    assert set(value.statistics) == {"distill_loss"}
    assert float(value.statistics["distill_loss"]) == pytest.approx(float(expected))


def test_confidence_weighting_counts_anchors_by_the_start_and_logs_their_mean_weight():
    uniform = GuardTerm(1.0, temperature=0.1, include_positive=False, within_field=False)
    confident = GuardTerm(
        1.0,
        temperature=0.1,
        include_positive=False,
        within_field=False,
        weighting=DistillWeighting.GUIDE_CONFIDENCE,
        confidence_power=2.0,
    )
    step = _step()
    weighted = confident(step)
    assert 0.0 < float(weighted.statistics["distill_anchor_weight"]) <= 1.0
    assert "distill_anchor_weight" not in uniform(step).statistics
    assert float(weighted.loss) != pytest.approx(float(uniform(step).loss))
