"""PyTorch's CPU dropout masks, the same bits drawn several times faster.

On a CPU, ``torch.nn.functional.dropout`` in training draws its mask with ``bernoulli_(keep)``,
which takes each element from two 32-bit numbers of the default generator's Mersenne Twister
(MT19937), one element after the other on one core: the 53-bit number
``(first & 0x1FFFFF) << 32 | second`` is kept when it is below ``keep * 2**53``. Once the matrix
products of a step run on AMX tiles, those draws are the largest cost after the products
(``benchmarks/RESULTS.md``). The recurrence and the tempering of MT19937 vectorise over the 624
words of a block; this module draws the same numbers, compares them the same way and writes the
scaled mask ``bernoulli_(keep).div_(keep)`` in one pass (a compiled NumPy kernel, numba), then
writes the generator's state back as ``bernoulli_`` would have left it. So a seed gives the
masks it gave before, bit for bit, and the next draw (a mask, a sample, a shuffle) is unchanged.

The generator's state is read and written through ``get_state``/``set_state``, whose layout
(PyTorch's ``CPUGeneratorImplState``: the words at byte 24, one to 8 bytes, the draws left at
byte 8, the next word's index at byte 16) is checked once per process against ``bernoulli_``
itself; where the check fails, or numba is missing, masks come from ``bernoulli_`` as before.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable

import numpy as np
import torch

logger = logging.getLogger(__name__)

WORDS = 624  # MT19937's block of state words
STATE_BYTES = 5056  # len(torch.Generator().get_state()) for the MT19937 CPU generator
LEFT_AT, NEXT_AT, WORDS_AT = 8, 16, 24  # byte offsets in the state; each word is stored in 8 bytes
# The unsigned view each dtype's bits are written through, and the NumPy type of that view.
BIT_VIEWS = {
    torch.float16: (torch.int16, np.uint16),
    torch.bfloat16: (torch.int16, np.uint16),
    torch.float32: (torch.int32, np.uint32),
    torch.float64: (torch.int64, np.uint64),
}


def scaled_keep_mask(
    like: torch.Tensor, keep: float, generator: torch.Generator | None = None
) -> torch.Tensor:
    """``torch.empty_like(like).bernoulli_(keep, generator=generator).div_(keep)``, bit for bit,
    leaving ``generator`` (the default CPU generator when None) in the state that call leaves it in;
    drawn by the compiled kernel for a contiguous CPU tensor of a floating dtype and a ``keep`` above
    0 where the kernel is available and checked, by that call itself otherwise."""
    generator = torch.default_generator if generator is None else generator
    # keep 0: bernoulli_(0).div_(0) is NaN, which the kernel does not write.
    if like.dtype in BIT_VIEWS and like.is_contiguous() and like.device.type == "cpu" and keep > 0:
        kernel = mask_kernel()
        if kernel is not None:
            return kernel_keep_mask(kernel, like, keep, generator)
    return torch.empty_like(like).bernoulli_(keep, generator=generator).div_(keep)


def kernel_keep_mask(
    kernel: Callable, like: torch.Tensor, keep: float, generator: torch.Generator
) -> torch.Tensor:
    """``scaled_keep_mask`` drawn by ``kernel``: the generator's words and position read from its
    state, advanced by the kernel and written back."""
    mask = torch.empty_like(like, memory_format=torch.contiguous_format)
    if mask.numel() == 0:
        return mask
    bits, numpy_bits = BIT_VIEWS[like.dtype]
    threshold = keep_threshold(keep)
    state = generator.get_state()
    raw = state.numpy()
    stored_words = raw[WORDS_AT : WORDS_AT + 8 * WORDS].view(np.uint64)
    words = stored_words.astype(np.uint32)
    position = WORDS + 1 - int(raw[LEFT_AT : LEFT_AT + 4].view(np.int32)[0])
    position = kernel(
        words,
        position,
        mask.view(bits).numpy().reshape(-1).view(numpy_bits),
        np.uint32(threshold >> 32),
        np.uint32(threshold & 0xFFFFFFFF),
        numpy_bits(kept_value_bits(like.dtype, keep)),
    )
    stored_words[:] = words
    raw[LEFT_AT : LEFT_AT + 4].view(np.int32)[0] = WORDS + 1 - position
    raw[NEXT_AT : NEXT_AT + 8].view(np.uint64)[0] = position
    generator.set_state(state)
    return mask


def keep_threshold(keep: float) -> int:
    """The 53-bit numbers below which ``bernoulli_(keep)`` keeps an element: its uniform double
    ``k / 2**53`` is compared with ``keep``, so ``k < keep * 2**53``, rounded up."""
    if not 0.0 <= keep <= 1.0:
        raise ValueError(f"keep must be a probability; got {keep}.")
    return math.ceil(keep * 2.0**53)  # the product is exact: a power of two


@functools.lru_cache(maxsize=64)
def kept_value_bits(dtype: torch.dtype, keep: float) -> int:
    """The bits of ``1 / keep`` as ``div_`` writes them into a mask of ``dtype`` (computed by ``div_``
    itself, over a length that takes its vectorised and its scalar path)."""
    bits, _ = BIT_VIEWS[dtype]
    values = torch.ones(67, dtype=dtype).div_(keep).view(bits)
    if not bool((values == values[0]).all()):
        raise RuntimeError(f"div_ wrote different values of 1 / {keep} in {dtype}.")
    return int(values[0]) & ((1 << (8 * values.element_size())) - 1)


@functools.cache
def mask_kernel() -> Callable | None:
    """The compiled kernel, checked against ``bernoulli_`` on a generator of its own; None (masks
    from ``bernoulli_``) where numba is missing, fails to compile or load its cache, or the check fails."""
    try:
        kernel = compiled_kernel()
        matches = kernel_matches_bernoulli(kernel)
    except ImportError:
        logger.info("numba is not installed: CPU dropout masks come from bernoulli_.")
        return None
    except Exception as error:  # numba's compile or cache errors: bernoulli_ draws the same masks
        logger.warning("The CPU dropout mask kernel did not compile (%s): masks come from bernoulli_.", error)
        return None
    if not matches:
        logger.warning(
            "This PyTorch's generator state or bernoulli_ differs from what base/bernoulli_masks.py reads: "
            "CPU dropout masks come from bernoulli_."
        )
        return None
    return kernel


def kernel_matches_bernoulli(kernel: Callable) -> bool:
    """Whether ``kernel`` draws ``bernoulli_``'s masks and leaves the generator as it does, for
    counts that end inside a block, on a block's last word (a pair split over two blocks) and across
    several blocks, after a single 32-bit draw has shifted the pairs, in three of the dtypes it writes."""
    if len(torch.Generator().get_state()) != STATE_BYTES:
        return False
    ours, theirs = torch.Generator().manual_seed(20261207), torch.Generator().manual_seed(20261207)
    for count, keep, dtype in (
        (5, 0.9, torch.float32),
        (623, 0.5, torch.bfloat16),
        (2000, 0.999, torch.float64),
    ):
        for generator in (ours, theirs):
            torch.randint(0, 2, (1,), generator=generator)  # one 32-bit draw: pairs start on an odd word
        like = torch.empty(count, dtype=dtype)
        drawn = kernel_keep_mask(kernel, like, keep, ours)
        expected = torch.empty_like(like).bernoulli_(keep, generator=theirs).div_(keep)
        if not torch.equal(drawn, expected) or not torch.equal(ours.get_state(), theirs.get_state()):
            return False
    return True


def compiled_kernel() -> Callable:
    """Compiles (or loads from numba's cache) the kernel that draws a scaled mask: ``draw(words,
    position, mask, threshold_high, threshold_low, kept) -> position``, where ``words`` are the 624
    state words (updated in place), ``position`` the index of the next word (624: a new block is
    due), ``mask`` the flat unsigned view of the mask, and the threshold the 53-bit one, split."""
    from numba import njit

    upper, lower, matrix = np.uint32(0x80000000), np.uint32(0x7FFFFFFF), np.uint32(0x9908B0DF)
    one, zero, far = np.uint32(1), np.uint32(0), 397

    @njit(cache=True, boundscheck=False)
    def next_block(words):
        """MT19937's recurrence over the block, in three loops whose reads never follow their writes."""
        for i in range(WORDS - far):
            y = (words[i] & upper) | (words[i + 1] & lower)
            words[i] = words[i + far] ^ (y >> one) ^ ((zero - (y & one)) & matrix)
        for i in range(WORDS - far, WORDS - 1):
            y = (words[i] & upper) | (words[i + 1] & lower)
            words[i] = words[i + far - WORDS] ^ (y >> one) ^ ((zero - (y & one)) & matrix)
        y = (words[WORDS - 1] & upper) | (words[0] & lower)
        words[WORDS - 1] = words[far - 1] ^ (y >> one) ^ ((zero - (y & one)) & matrix)

    @njit(cache=True, inline="always")
    def tempered(y):
        y ^= y >> np.uint32(11)
        y ^= (y << np.uint32(7)) & np.uint32(0x9D2C5680)
        y ^= (y << np.uint32(15)) & np.uint32(0xEFC60000)
        return y ^ (y >> np.uint32(18))

    @njit(cache=True, inline="always")
    def kept(first, second, high, low):
        """Whether ``(first & 0x1FFFFF) << 32 | second`` is below the threshold ``high << 32 | low``."""
        first = tempered(first) & np.uint32(0x1FFFFF)
        return (first < high) | ((first == high) & (tempered(second) < low))

    @njit(cache=True, boundscheck=False)
    def pairs_into(words, mask, high, low, kept_value, dropped):
        for k in range(mask.shape[0]):
            mask[k] = kept_value if kept(words[2 * k], words[2 * k + 1], high, low) else dropped

    @njit(cache=True, boundscheck=False)
    def draw(words, position, mask, high, low, kept_value):
        count, done = mask.shape[0], 0
        # A zero of the mask's type: a literal 0 would unify uint64 to float64, whose store rounds.
        dropped = kept_value ^ kept_value
        while done < count:
            if position >= WORDS:
                next_block(words)
                position = 0
            if position < WORDS - 1:
                pairs = min((WORDS - position) // 2, count - done)
                pairs_into(
                    words[position : position + 2 * pairs],
                    mask[done : done + pairs],
                    high,
                    low,
                    kept_value,
                    dropped,
                )
                done += pairs
                position += 2 * pairs
            else:  # the block's last word and the next block's first make one element
                first = words[WORDS - 1]
                next_block(words)
                mask[done] = kept_value if kept(first, words[0], high, low) else dropped
                done += 1
                position = 1
        return position

    return draw
