"""The MLM term: weighted after its ramp, logged at weight 0 too, where it trains nothing."""

import pytest
import torch

from metricbert_trainer.metricbert.terms import MlmTerm, StepVectors


def _step(global_step: int, mlm_loss: float = 2.0) -> StepVectors:
    vectors = torch.zeros(4, 8)
    outputs = {"mlm_loss": torch.tensor(mlm_loss, requires_grad=True), "mlm_tokens": torch.tensor(10)}
    return StepVectors({}, outputs, vectors, vectors, ("title", "description"), global_step=global_step)


def test_the_weight_rises_linearly_over_the_ramp_then_stays():
    term = MlmTerm(weight=1.0, ramp_steps=4)
    assert [term.weight_at(step) for step in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert [MlmTerm(0.5).weight_at(step) for step in (0, 100)] == [0.5, 0.5]


def test_the_share_is_the_ramped_weight_times_the_model_loss_and_the_loss_is_logged():
    value = MlmTerm(weight=1.0, ramp_steps=4)(_step(global_step=1))
    assert float(value.loss.detach()) == pytest.approx(0.5 * 2.0)
    assert value.loss.requires_grad
    assert float(value.statistics["mlm_loss"]) == 2.0 and value.statistics["mlm_loss"].grad_fn is None


def test_at_weight_0_it_adds_nothing_to_the_loss_and_still_logs_the_mlm_loss():
    value = MlmTerm(weight=0.0, ramp_steps=0)(_step(global_step=0, mlm_loss=3.0))
    assert value.loss is None
    assert float(value.statistics["mlm_loss"]) == 3.0
