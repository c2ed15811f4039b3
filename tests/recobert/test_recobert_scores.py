"""The title-description matching score and loss, and z-normalisation, on hand-computed examples."""

import math

import numpy as np
import pytest
import torch

from metricbert_trainer.recobert import tdm_loss, tdm_score, z_normalise


def test_tdm_score_maps_the_cosine_into_zero_one():
    titles = torch.tensor([[1.0, 0.0], [1.0, 0.0], [2.0, 0.0], [1.0, 0.0]])
    descriptions = torch.tensor([[0.0, 3.0], [0.6, 0.8], [5.0, 0.0], [-1.0, 0.0]])
    # cos = 0, 0.6, 1, -1  ->  (1 + cos) / 2 = 0.5, 0.8, 1, 0
    torch.testing.assert_close(tdm_score(titles, descriptions), torch.tensor([0.5, 0.8, 1.0, 0.0]))


def test_tdm_loss_is_binary_cross_entropy_of_the_score():
    scores = torch.tensor([0.8, 0.8])
    labels = torch.tensor([1.0, 0.0])
    # -ln 0.8 for the match, -ln 0.2 for the mismatch, averaged.
    expected = (-math.log(0.8) - math.log(0.2)) / 2
    assert float(tdm_loss(scores, labels)) == pytest.approx(expected, rel=1e-6)


def test_tdm_loss_stays_finite_at_the_extremes_and_has_gradients():
    titles = torch.tensor([[1.0, 0.0], [1.0, 0.0]], requires_grad=True)
    descriptions = torch.tensor([[-1.0, 0.0], [1.0, 0.0]])
    loss = tdm_loss(tdm_score(titles, descriptions), torch.tensor([1.0, 0.0]))
    assert torch.isfinite(loss) and float(loss.detach()) > 10  # both pairs entirely wrong
    loss.backward()
    assert torch.isfinite(titles.grad).all()


def test_z_normalise_uses_only_valid_entries():
    scores = np.array([[1.0, 2.0, 3.0, 100.0], [5.0, 5.0, 5.0, 5.0]])
    valid = np.array([[True, True, True, False], [True, True, True, True]])
    normalised = z_normalise(scores, valid)
    # Row 0: mean 2, population std sqrt(2/3); the invalid 100 is ignored and set to 0.
    np.testing.assert_allclose(normalised[0], [-math.sqrt(1.5), 0.0, math.sqrt(1.5), 0.0])
    # A constant row carries no information: zeros, not NaN.
    np.testing.assert_array_equal(normalised[1], np.zeros(4))


def test_z_normalise_is_invariant_to_scale_and_shift():
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(3, 50))
    valid = rng.random((3, 50)) > 0.2
    np.testing.assert_allclose(z_normalise(7.0 * scores - 3.0, valid), z_normalise(scores, valid), atol=1e-12)
    with pytest.raises(ValueError, match="same shape"):
        z_normalise(scores, valid[:, :10])
