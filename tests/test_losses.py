import math

import pytest
import torch

from metricbert_trainer.losses import TripletLoss, embedding_spread


def _unit(degrees):
    radians = math.radians(degrees)
    return [math.cos(radians), math.sin(radians)]


def test_triplet_loss_on_hand_computed_example():
    # Two items: titles at 0 and 90 degrees, descriptions at 30 and 150 degrees.
    titles = torch.tensor([_unit(0), _unit(90)])
    descriptions = torch.tensor([_unit(30), _unit(150)])
    output = TripletLoss(margin=0.1, anchors="both")(titles, descriptions)
    # Angular distances in units of pi: d = angle / 180.
    # title 0: d(a,p)=30/180, negatives: title 1 (90), desc 1 (150) -> hardest 90/180; loss 0.1+30/180-90/180 < 0 -> 0
    # title 1: d(a,p)=60/180, negatives: title 0 (90), desc 0 (60) -> 60/180; loss 0.1
    # desc 0: d(a,p)=30/180, negatives: title 1 (60), desc 1 (120) -> 60/180; loss 0.1+30/180-60/180 = 0.1-1/6 < 0 -> 0
    # desc 1: d(a,p)=60/180, negatives: title 0 (150), desc 0 (120) -> 120/180; loss 0.1-60/180 < 0 -> 0
    assert output.loss.item() == pytest.approx(0.1 / 4, abs=1e-4)
    assert output.statistics["margin_violation_rate"] == pytest.approx(0.25)
    assert output.statistics["mean_d_ap"] == pytest.approx((30 + 60 + 30 + 60) / 180 / 4, abs=1e-4)


def test_triplet_loss_gradient_pulls_positive_and_pushes_negative():
    torch.manual_seed(0)
    titles = torch.randn(8, 16, requires_grad=True)
    descriptions = torch.randn(8, 16, requires_grad=True)
    loss = TripletLoss(margin=1.0)(titles, descriptions).loss
    loss.backward()
    assert loss.item() > 0
    assert titles.grad.abs().sum() > 0 and descriptions.grad.abs().sum() > 0


def test_negative_margin_rejected():
    with pytest.raises(ValueError, match="margin"):
        TripletLoss(margin=-0.1)


def test_embedding_spread_is_zero_for_collapsed_and_half_for_orthogonal():
    assert embedding_spread(torch.ones(4, 3)) == pytest.approx(0.0, abs=1e-3)
    assert embedding_spread(torch.eye(3)) == pytest.approx(0.5, abs=1e-4)


def test_excluded_candidates_are_never_mined_and_empty_anchors_dropped():
    titles = torch.tensor([_unit(0), _unit(90)])
    descriptions = torch.tensor([_unit(30), _unit(150)])
    loss = TripletLoss(margin=0.1, anchors="title")
    # Anchor 0 (title 0) may not take title 1 (its hardest); anchor 1 loses every candidate.
    excluded = torch.tensor([[False, True, False, False], [True, False, True, True]])
    output = loss(titles, descriptions, excluded)
    assert output.anchor_index.tolist() == [0]
    assert output.negative_index.tolist() == [3]  # description 1, the only candidate left
