"""Choosing ``max_length`` from the catalog instead of one number for every catalog.

Wine reviews run to about 60 tokens, while catalogs of articles or package descriptions run to
200-300: a fixed 128 wastes padding-free compute on the first and cuts the second in half, and
the model then learns (and, saved with that length, ranks) from half a description. The data
decide instead: the given percentile of each field's token lengths, the largest over the fields.
Shorter fields lose nothing by the larger value: every field is padded only to its own longest
text in the batch (``collator``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
from transformers import PreTrainedTokenizerBase

from metricbert_trainer.errors import UsageError

logger = logging.getLogger(__name__)

# Lengths are rounded up to a multiple of this: tensor kernels like it, and it keeps reported values round.
LENGTH_MULTIPLE = 8
# Texts tokenized at a time wherever a whole catalog is read (lengths, TF-IDF, the word prior, the
# encodings' order): a fast tokenizer's encodings of a whole catalog at once held 6.5 GiB per 500,000
# descriptions (``benchmarks/million_items.py lengths``).
TOKENIZING_CHUNK = 1024
# Texts of a field whose token lengths choose max_length: a larger field's are a random sample of
# this many (drawn with a fixed seed, so that every process of a run chooses alike). Counting every
# text took 68 s per million wine descriptions and 154 s per million Debian ones on two Zen 4 cores,
# in every process, before the catalog was tokenized again for training. At a million descriptions
# the 95th percentile of 100,000 lengths was the whole field's for the wines and 2 tokens under it
# for Debian's (287 of 289, both capped at 256), in a tenth of the time
# (``benchmarks/million_items.py max-length``).
LENGTHS_SAMPLED = 100_000


def catalog_token_ids(
    tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], max_length: int | None = None
) -> Iterator[list[int]]:
    """Each text's token ids (special tokens included), truncated at ``max_length`` as the
    collators truncate them (whole with ``None``), tokenized ``TOKENIZING_CHUNK`` texts at a time."""
    options = {"truncation": False, "verbose": False} if max_length is None else {"truncation": True}
    for start in range(0, len(texts), TOKENIZING_CHUNK):
        chunk = [str(text) for text in texts[start : start + TOKENIZING_CHUNK]]
        yield from tokenizer(chunk, max_length=max_length, **options)["input_ids"]


def token_lengths(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str]) -> np.ndarray:
    """Tokens per text, special tokens included (what truncation counts)."""
    return np.fromiter(
        (len(ids) for ids in catalog_token_ids(tokenizer, texts)), dtype=np.int64, count=len(texts)
    )


def data_driven_max_length(
    tokenizer: PreTrainedTokenizerBase,
    fields: Mapping[str, Sequence[str]],
    *,
    percentile: float = 95.0,
    cap: int = 256,
) -> int:
    """The ``percentile`` of each field's token lengths, the largest over ``fields``, rounded up to
    a multiple of ``LENGTH_MULTIPLE`` and capped at ``cap`` (and at the tokenizer's own limit).
    A field of more than ``LENGTHS_SAMPLED`` texts is measured on a sample of that many."""
    covered = {
        name: float(
            np.percentile(token_lengths(tokenizer, length_sample(texts, LENGTHS_SAMPLED)), percentile)
        )
        for name, texts in fields.items()
        if len(texts)
    }
    if not covered:
        raise ValueError("No texts to choose max_length from.")
    longest = max(covered.values())
    chosen = min(LENGTH_MULTIPLE * math.ceil(longest / LENGTH_MULTIPLE), cap, tokenizer.model_max_length)
    sampled = [name for name in covered if len(fields[name]) > LENGTHS_SAMPLED]
    logger.info(
        "max_length %d: the %gth percentile of the token lengths (%s%s), capped at %d.",
        chosen,
        percentile,
        ", ".join(f"{name} {value:.0f}" for name, value in covered.items()),
        f"; {', '.join(sampled)} from a sample of {LENGTHS_SAMPLED:,} texts" if sampled else "",
        cap,
    )
    return int(chosen)


def length_sample(texts: Sequence, size: int) -> Sequence:
    """``texts`` when there are at most ``size`` of them; else ``size`` of them drawn at random
    without replacement (seed 0, in the catalog's order)."""
    if len(texts) <= size:
        return texts
    rows = np.sort(np.random.default_rng(0).choice(len(texts), size, replace=False))
    return [texts[row] for row in rows]


def resolve_max_length(
    args, tokenizer: PreTrainedTokenizerBase | None, dataset, fields: Sequence[str], model=None
) -> int:
    """Sets ``args.max_length`` from ``dataset``'s ``fields`` when the configuration left it unset;
    with no catalog (or tokenizer) to measure, to ``args.max_length_cap``. Either way no longer
    than ``model``'s position embeddings reach: a longer explicit one is a ``UsageError``, which
    would otherwise be an index error in the embeddings at the first long batch."""
    cap = args.max_length_cap
    positions = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if isinstance(positions, int) and positions > 0:
        cap = min(cap, positions)
        if args.max_length is not None and args.max_length > positions:
            raise UsageError(
                f"max_length {args.max_length} is longer than the model's {positions} position embeddings; "
                f"use at most {positions}"
            )
    if args.max_length is not None:
        return args.max_length
    if dataset is None or tokenizer is None:
        args.max_length = cap
        logger.info("max_length %d: the cap, as there is no catalog to choose it from.", cap)
    else:
        texts = {name: dataset[name][:] for name in fields}
        args.max_length = data_driven_max_length(
            tokenizer, texts, percentile=args.max_length_percentile, cap=cap
        )
    return args.max_length
