"""PyTorch's CPU dropout masks drawn by the compiled kernel: the same bits as ``bernoulli_(keep).div_(keep)``
and the generator left as ``bernoulli_`` leaves it, whatever the dtype, the length and where in the
generator's block of words the draws start."""

import numpy as np
import pytest
import torch

from metricbert_trainer.base.bernoulli_masks import (
    compiled_kernel,
    keep_threshold,
    kernel_matches_bernoulli,
    mask_kernel,
    scaled_keep_mask,
)


def pytorchs_mask(like, keep, generator):
    return torch.empty_like(like).bernoulli_(keep, generator=generator).div_(keep)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("keep", [0.9, 0.5, 0.999, 1.0, 2**-40])
def test_the_kernel_draws_bernoullis_masks_and_leaves_its_generator_state(dtype, keep):
    assert mask_kernel() is not None  # numba is installed and the kernel passed its check
    ours, theirs = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    # Lengths that end inside a block of 624 words, on its last word, across many blocks; then
    # a single 32-bit draw between masks, so that the next mask's pairs start on an odd word.
    for shape in [(1,), (311,), (312,), (313,), (7, 1000), (1_000_003,)]:
        like = torch.empty(shape, dtype=dtype)
        drawn = scaled_keep_mask(like, keep, ours)
        assert drawn.dtype == dtype and drawn.shape == like.shape
        assert torch.equal(
            drawn.view(-1).view(torch.uint8), pytorchs_mask(like, keep, theirs).view(-1).view(torch.uint8)
        )
        assert torch.equal(ours.get_state(), theirs.get_state())
        assert torch.equal(torch.rand(1, generator=ours), torch.rand(1, generator=theirs))


def test_the_default_generator_is_used_and_a_seed_fixes_the_mask():
    like = torch.empty(10_000)
    torch.manual_seed(11)
    drawn = scaled_keep_mask(like, 0.9)
    torch.manual_seed(11)
    assert torch.equal(drawn, torch.empty_like(like).bernoulli_(0.9).div_(0.9))
    assert 0.88 < (drawn != 0).float().mean().item() < 0.92


def test_what_the_kernel_does_not_draw_comes_from_bernoulli():
    """A strided view and a keep of 0 (whose scaled mask is NaN) are drawn by ``bernoulli_``
    itself, with the same result."""
    ours, theirs = torch.Generator().manual_seed(2), torch.Generator().manual_seed(2)
    for like, keep in (
        (torch.empty(40, 30).t(), 0.9),
        (torch.empty(100), 0.0),
    ):
        drawn, expected = scaled_keep_mask(like, keep, ours), pytorchs_mask(like, keep, theirs)
        assert torch.equal(drawn.isnan(), expected.isnan())
        assert torch.equal(drawn.nan_to_num(), expected.nan_to_num()) and drawn.stride() == expected.stride()
    assert torch.equal(ours.get_state(), theirs.get_state())


def test_the_threshold_is_the_first_53_bit_number_bernoulli_drops():
    assert keep_threshold(0.5) == 2**52  # keep * 2**53 whole: numbers below it are kept
    assert keep_threshold(0.9) == int(np.ceil(0.9 * 2.0**53))
    assert keep_threshold(1.0) == 2**53 and keep_threshold(0.0) == 0
    with pytest.raises(ValueError, match="probability"):
        keep_threshold(1.5)


def test_the_check_refuses_a_kernel_that_draws_other_masks():
    """The check run before the kernel is used can fail: a kernel one word off the generator's
    position draws other masks, and one that keeps every element keeps too much."""
    kernel = compiled_kernel()
    assert kernel_matches_bernoulli(kernel)

    def every_element_kept(words, position, mask, high, low, kept_value):
        mask[:] = kept_value
        return kernel(words, position, np.empty_like(mask), high, low, kept_value)

    def a_word_skipped(words, position, mask, high, low, kept_value):
        return kernel(words, min(position + 1, 624), mask, high, low, kept_value)

    assert not kernel_matches_bernoulli(every_element_kept)
    assert not kernel_matches_bernoulli(a_word_skipped)
