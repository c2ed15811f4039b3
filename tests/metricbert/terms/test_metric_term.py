"""The metric term: its share is the in-batch loss times its weight, its statistics the loss's own."""

import pytest
import torch

from metricbert_trainer.metricbert.guide import StartingModelGuide
from metricbert_trainer.metricbert.losses import MultipleNegativesRankingLoss, TripletLoss
from metricbert_trainer.metricbert.terms import MetricTerm, StepVectors


def _step(guide_vectors=None, items: int = 6, seed: int = 0) -> StepVectors:
    generator = torch.Generator().manual_seed(seed)
    titles, descriptions = torch.randn(2, items, 8, generator=generator)
    return StepVectors({}, {}, titles, descriptions, ("title", "description"), guide_vectors=guide_vectors)


@pytest.mark.parametrize("loss", [TripletLoss(margin=0.2), MultipleNegativesRankingLoss()])
def test_the_share_is_the_weighted_loss_and_the_statistics_are_the_loss_own(loss):
    step = _step()
    value = MetricTerm(loss, weight=0.5)(step)
    expected = loss(step.titles, step.descriptions)
    assert MetricTerm(loss, 0.5).name == loss.name
    torch.testing.assert_close(value.loss, 0.5 * expected.loss)
    assert value.statistics[f"{loss.name}_loss"] == pytest.approx(float(expected.loss))
    assert {f"{loss.name}_loss", *expected.statistics} == set(value.statistics)
    assert value.statistics[f"{loss.name}_loss"].grad_fn is None
    # At weight 0 the term still logs what it would have trained on.
    silent = MetricTerm(loss, weight=0.0)(step)
    assert float(silent.loss) == 0.0 and silent.statistics[f"{loss.name}_loss"] > 0


def test_with_the_guide_vectors_it_logs_how_often_the_start_ranks_the_mined_negative_closer():
    loss = TripletLoss(margin=0.2)
    plain = _step()
    # The guide sees each item's positive as the description itself: its vectors are the student's.
    guide = torch.cat([plain.titles, plain.descriptions])
    value = MetricTerm(loss, 1.0)(_step(guide_vectors=guide))
    mined = loss(plain.titles, plain.descriptions, guide_vectors=guide)
    expected = StartingModelGuide.negative_closer_rate(
        guide, mined.anchor_index, mined.positive_index, mined.negative_index
    )
    assert value.statistics["guide_negative_closer_rate"] == pytest.approx(float(expected))
    assert "guide_negative_closer_rate" not in MetricTerm(loss, 1.0)(plain).statistics
