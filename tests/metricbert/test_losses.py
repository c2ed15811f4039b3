import math

import pytest
import torch

from metricbert_trainer.base.distances import Distance, paired_distance
from metricbert_trainer.metricbert.losses import (
    ContrastiveLoss,
    CosineLoss,
    LogisticTripletLoss,
    MultipleNegativesRankingLoss,
    TripletLoss,
    embedding_spread,
)


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


# The loss family. The example: titles at 0 and 90 degrees, descriptions at 30 and 150 degrees,
# both fields anchoring. Hard (angular) mining picks, per anchor (title 0, title 1, desc 0,
# desc 1), the negatives title 1 (90 deg away), desc 0 (60), title 1 (60) and desc 0 (120); the
# positives are 30, 60, 30 and 60 degrees away.
POSITIVE_ANGLES = (30, 60, 30, 60)
NEGATIVE_ANGLES = (90, 60, 60, 120)


def _cos(degrees):
    return math.cos(math.radians(degrees))


def _example():
    return torch.tensor([_unit(0), _unit(90)]), torch.tensor([_unit(30), _unit(150)])


def _per_anchor_mean(formula):
    return sum(formula(_cos(p), _cos(n)) for p, n in zip(POSITIVE_ANGLES, NEGATIVE_ANGLES, strict=True)) / 4


def test_mining_picks_the_expected_negatives_for_every_objective():
    for loss in (TripletLoss(), ContrastiveLoss(), CosineLoss(), LogisticTripletLoss()):
        output = loss(*_example())
        assert output.negative_index.tolist() == [1, 2, 1, 2], loss.name


def test_contrastive_loss_on_hand_computed_example():
    expected = _per_anchor_mean(lambda sp, sn: max(0.0, 1 - sp) + max(0.0, sn - 0.0))
    # = ((1 - .866) + 0 + (1 - .5) + .5 + (1 - .866) + .5 + (1 - .5) + 0) / 4
    assert expected == pytest.approx((2 * (1 - _cos(30)) + 2 * 0.5 + 2 * 0.5) / 4)
    assert ContrastiveLoss()(*_example()).loss.item() == pytest.approx(expected, abs=1e-5)


def test_cosine_loss_on_hand_computed_example():
    expected = _per_anchor_mean(lambda sp, sn: max(0.0, 1 - sp) + max(0.0, sn + 1.0))
    assert CosineLoss()(*_example()).loss.item() == pytest.approx(expected, abs=1e-5)


def test_logistic_triplet_on_hand_computed_example():
    expected = _per_anchor_mean(lambda sp, sn: math.log1p(math.exp(-(sp - sn))))
    assert LogisticTripletLoss()(*_example()).loss.item() == pytest.approx(expected, abs=1e-5)


def test_mnrl_on_hand_computed_example():
    # Every other element is a candidate; the positive is the target of a softmax over
    # 20 * cosine. Anchor title 0 sees desc 0 (30 deg, positive), title 1 (90), desc 1 (150).
    angles = {  # anchor -> (positive angle, other angles)
        "title 0": (30, (90, 150)),
        "title 1": (60, (90, 60)),
        "desc 0": (30, (60, 120)),
        "desc 1": (60, (150, 120)),
    }
    expected = 0.0
    for positive, others in angles.values():
        logits = [20 * _cos(positive)] + [20 * _cos(angle) for angle in others]
        expected += -(logits[0] - math.log(sum(math.exp(value) for value in logits))) / 4
    assert MultipleNegativesRankingLoss(scale=20)(*_example()).loss.item() == pytest.approx(
        expected, abs=1e-4
    )


def test_mnrl_never_scores_excluded_candidates():
    titles, descriptions = _example()
    # Title 0 may not use title 1: its softmax then runs over desc 0 (positive) and desc 1.
    excluded = torch.zeros(2, 4, dtype=torch.bool)
    excluded[0, 1] = True
    loss = MultipleNegativesRankingLoss(anchors="title")
    value = loss(titles, descriptions, excluded).loss.item()
    title_0 = -(20 * _cos(30) - math.log(math.exp(20 * _cos(30)) + math.exp(20 * _cos(150))))
    title_1 = -(20 * _cos(60) - math.log(sum(math.exp(20 * _cos(a)) for a in (60, 90, 60))))
    assert value == pytest.approx((title_0 + title_1) / 2, abs=1e-4)


def _gradients(loss, titles, descriptions):
    titles = titles.clone().requires_grad_(True)
    descriptions = descriptions.clone().requires_grad_(True)
    value = loss(titles, descriptions).loss
    value.backward()
    return value.item(), titles.grad, descriptions.grad


def test_contrastive_and_cosine_losses_agree_while_no_negative_cosine_is_negative():
    # Non-negative coordinates: every cosine in the batch is >= 0, as in the paper's runs.
    generator = torch.Generator().manual_seed(0)
    titles, descriptions = torch.rand(6, 16, generator=generator), torch.rand(6, 16, generator=generator)
    value_c, titles_c, descriptions_c = _gradients(ContrastiveLoss(), titles, descriptions)
    value_k, titles_k, descriptions_k = _gradients(CosineLoss(), titles, descriptions)
    torch.testing.assert_close(titles_c, titles_k)
    torch.testing.assert_close(descriptions_c, descriptions_k)
    # The values differ by the constant 0 - (-1) of the negative margins, and only by it.
    assert value_k - value_c == pytest.approx(1.0, abs=1e-5)


def test_contrastive_and_cosine_losses_part_once_a_negative_cosine_is_negative():
    titles, descriptions = _example()  # desc 1's mined negative is 120 degrees away: cosine -0.5
    _, titles_c, descriptions_c = _gradients(ContrastiveLoss(), titles, descriptions)
    _, titles_k, descriptions_k = _gradients(CosineLoss(), titles, descriptions)
    assert not torch.allclose(descriptions_c, descriptions_k)


def test_angular_gradient_outgrows_the_cosine_one_as_vectors_align():
    # Paper eqs. 5-6: d(1 - cos)/dv vanishes like sin(theta) as theta -> 0, while the gradient
    # of arccos(cos)/pi stays 1/pi per radian. Checked with autograd on the distances themselves.
    anchor = torch.tensor([[1.0, 0.0]])
    ratios = []
    for theta in (0.3, 0.1, 0.01):
        norms = {}
        for distance in (Distance.ANGULAR, Distance.COSINE):
            other = torch.tensor([[math.cos(theta), math.sin(theta)]], requires_grad=True)
            paired_distance(anchor, other, distance).sum().backward()
            norms[distance] = other.grad.norm().item()
        assert norms[Distance.ANGULAR] == pytest.approx(1 / math.pi, rel=1e-3)
        assert norms[Distance.COSINE] == pytest.approx(math.sin(theta), rel=1e-3)
        assert norms[Distance.ANGULAR] > norms[Distance.COSINE]
        ratios.append(norms[Distance.ANGULAR] / norms[Distance.COSINE])
    assert ratios == sorted(ratios) and ratios[-1] > 30


def test_objective_settings_are_validated():
    with pytest.raises(ValueError, match="does not apply to objective mnrl"):
        MultipleNegativesRankingLoss(mining="random")
    with pytest.raises(ValueError, match="scale must be > 0"):
        MultipleNegativesRankingLoss(scale=0)
    with pytest.raises(ValueError, match="negative_margin < positive_margin"):
        ContrastiveLoss(positive_margin=0.2, negative_margin=0.5)


def test_config_dict_names_every_setting():
    assert CosineLoss(mining="semi_hard").get_config_dict() == {
        "objective": "cosine",
        "distance": "angular",
        "mining": "semi_hard",
        "anchors": "both",
        "negative_pool": "all",
        "false_negative_filter": False,
        "false_negative_margin": 0.0,
        "positive_margin": 1.0,
        "negative_margin": -1.0,
    }
