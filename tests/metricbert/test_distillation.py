"""The guard against forgetting: relational distillation towards the starting model."""

import pytest
import torch

from metricbert_trainer.metricbert.losses.distillation import (
    guide_positive_confidence,
    relational_distillation,
)


def test_no_loss_and_no_gradient_while_the_model_agrees_with_the_guide():
    elements = torch.randn(8, 16, requires_grad=True)
    loss = relational_distillation(elements, elements.detach().clone(), temperature=0.05)
    loss.backward()
    assert float(loss.detach()) == pytest.approx(0.0, abs=1e-6)
    assert float(elements.grad.abs().max()) < 1e-5


@pytest.mark.parametrize("include_positive", [True, False])
def test_matches_the_kl_divergence_written_out_by_hand(include_positive):
    torch.manual_seed(0)
    student, guide = torch.randn(6, 4), torch.randn(6, 4)  # 3 items: rows 0-2 titles, 3-5 descriptions
    temperature = 0.5
    expected = []
    for anchor in range(6):
        positive = (anchor + 3) % 6
        others = [j for j in range(6) if j != anchor and (include_positive or j != positive)]
        s = torch.nn.functional.cosine_similarity(student[anchor][None], student[others]) / temperature
        g = torch.nn.functional.cosine_similarity(guide[anchor][None], guide[others]) / temperature
        p, log_q = g.softmax(0), s.log_softmax(0)
        expected.append(float((p * (p.log() - log_q)).sum()))
    loss = relational_distillation(student, guide, temperature=temperature, include_positive=include_positive)
    assert float(loss.detach()) == pytest.approx(sum(expected) / 6, rel=1e-5)


def test_within_field_distils_each_element_against_its_own_field_only():
    torch.manual_seed(2)
    student, guide = torch.randn(8, 4), torch.randn(8, 4)  # 4 items: rows 0-3 titles, 4-7 descriptions
    expected = []
    for anchor in range(8):
        others = [j for j in range(8) if j != anchor and j // 4 == anchor // 4]
        s = torch.nn.functional.cosine_similarity(student[anchor][None], student[others]) / 0.5
        g = torch.nn.functional.cosine_similarity(guide[anchor][None], guide[others]) / 0.5
        p, log_q = g.softmax(0), s.log_softmax(0)
        expected.append(float((p * (p.log() - log_q)).sum()))
    loss = relational_distillation(student, guide, temperature=0.5, within_field=True)
    assert float(loss.detach()) == pytest.approx(sum(expected) / 8, rel=1e-5)


def test_within_field_leaves_cross_field_similarities_free():
    torch.manual_seed(3)
    guide = torch.randn(6, 4)
    student = guide.clone()
    # The descriptions rotate as a block: their own geometry stays, their similarities to titles change.
    student[3:] = guide[3:] @ torch.linalg.qr(torch.randn(4, 4))[0]
    loss = relational_distillation(student, guide, temperature=0.1, within_field=True)
    assert float(loss.detach()) == pytest.approx(0.0, abs=1e-5)
    assert float(relational_distillation(student, guide, temperature=0.1)) > 1e-3


def test_pulls_a_drifted_model_back_towards_the_guide_structure():
    torch.manual_seed(1)
    guide = torch.randn(10, 8)
    student = (guide + 0.8 * torch.randn(10, 8)).requires_grad_(True)
    optimizer = torch.optim.SGD([student], lr=0.05)
    losses = []
    for _ in range(50):
        loss = relational_distillation(student, guide, temperature=0.1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.5 * losses[0]


def test_a_one_item_batch_gives_a_zero_joined_to_the_graph():
    elements = torch.randn(2, 4, requires_grad=True)
    loss = relational_distillation(elements, elements.detach(), temperature=0.05)
    loss.backward()
    assert float(loss.detach()) == 0.0 and elements.grad is not None


def test_temperature_must_be_positive():
    with pytest.raises(ValueError, match="temperature"):
        relational_distillation(torch.randn(4, 2), torch.randn(4, 2), temperature=0.0)


def test_guide_confidence_is_near_one_where_the_guide_matches_each_item_across_fields():
    torch.manual_seed(4)
    items = torch.nn.functional.normalize(torch.randn(5, 32), dim=-1)
    # Each description lies next to its own title: the guide matches every item.
    matched = torch.cat([items, items + 0.01 * torch.randn(5, 32)])
    assert guide_positive_confidence(matched, temperature=0.05).min() > 0.99
    # The descriptions are shuffled: each title's own description is far, another item's is near.
    shuffled = torch.cat([items, items[[1, 2, 3, 4, 0]] + 0.01 * torch.randn(5, 32)])
    assert guide_positive_confidence(shuffled, temperature=0.05).max() < 0.01


def test_guide_confidence_is_the_softmax_probability_of_the_positive_written_out_by_hand():
    torch.manual_seed(5)
    guide = torch.randn(6, 4)
    expected = []
    for anchor in range(6):
        others = [j for j in range(6) if j != anchor]
        similarities = torch.nn.functional.cosine_similarity(guide[anchor][None], guide[others]) / 0.5
        expected.append(float(similarities.softmax(0)[others.index((anchor + 3) % 6)]))
    assert guide_positive_confidence(guide, temperature=0.5).tolist() == pytest.approx(expected, rel=1e-5)


def test_anchor_weights_scale_each_anchor_term_within_the_mean_over_all_anchors():
    torch.manual_seed(6)
    student, guide = torch.randn(8, 4), torch.randn(8, 4)
    per_anchor = [
        float(
            relational_distillation(student, guide, temperature=0.5, anchor_weights=torch.eye(8)[anchor]) * 8
        )
        for anchor in range(8)
    ]
    assert sum(per_anchor) / 8 == pytest.approx(
        float(relational_distillation(student, guide, temperature=0.5))
    )
    weights = torch.rand(8)
    weighted = relational_distillation(student, guide, temperature=0.5, anchor_weights=weights)
    expected = sum(w * t for w, t in zip(weights.tolist(), per_anchor, strict=True)) / 8
    assert float(weighted) == pytest.approx(expected, rel=1e-5)
    # No weight, no guard: a model free to drift.
    assert (
        float(relational_distillation(student, guide, temperature=0.5, anchor_weights=torch.zeros(8))) == 0.0
    )
