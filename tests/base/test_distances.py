import math

import pytest
import torch

from metricbert_trainer.base.distances import Distance, paired_distance, pairwise_distance


def test_angular_distance_of_same_opposite_and_orthogonal_vectors():
    u = torch.tensor([[1.0, 2.0, 3.0]])
    assert paired_distance(u, 5 * u, "angular").item() == pytest.approx(0.0, abs=1e-3)
    assert paired_distance(u, -u, "angular").item() == pytest.approx(1.0, abs=1e-3)
    assert paired_distance(
        torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 3.0]]), "angular"
    ).item() == pytest.approx(0.5)


def test_angular_distance_symmetric_bounded_and_matches_definition():
    torch.manual_seed(0)
    x, y = torch.randn(7, 16), torch.randn(5, 16)
    d = pairwise_distance(x, y, Distance.ANGULAR)
    assert torch.allclose(d, pairwise_distance(y, x, Distance.ANGULAR).T)
    assert bool(((d >= 0) & (d <= 1)).all())
    cos = torch.nn.functional.cosine_similarity(x[2], y[3], dim=0)
    assert d[2, 3].item() == pytest.approx(math.acos(cos.item()) / math.pi, abs=1e-5)
    assert torch.allclose(
        paired_distance(x[:5], y, "angular"), pairwise_distance(x[:5], y, "angular").diagonal()
    )


@pytest.mark.parametrize("distance", list(Distance))
@pytest.mark.parametrize("case", ["identical", "antipodal", "zero"])
def test_gradients_stay_finite(distance, case):
    u = torch.tensor([[0.3, -1.2, 2.0]], requires_grad=True)
    other = {"identical": u.detach().clone(), "antipodal": -u.detach().clone(), "zero": torch.zeros(1, 3)}[
        case
    ]
    other.requires_grad_(True)
    paired_distance(u, other, distance).sum().backward()
    assert torch.isfinite(u.grad).all() and torch.isfinite(other.grad).all()


def test_float32_even_for_bf16_inputs():
    x = torch.randn(4, 8).to(torch.bfloat16)
    assert pairwise_distance(x, x, "angular").dtype == torch.float32


def test_unknown_distance_lists_choices():
    with pytest.raises(ValueError, match="manhattan"):
        pairwise_distance(torch.ones(1, 2), torch.ones(1, 2), "manhattan")
