"""Joint ``title [SEP] description`` inputs and the segment masks that split them again.

RecoBERT encodes a title and a description as one sequence, so each attends to the other, and
then pools each field over its own tokens. The same function builds the training pairs (the
collator) and the scored pairs of inference, so both see identical inputs. The segments come
from the tokenizer's own pair template (``sequence_ids``), so any fast tokenizer works, BERT's
``[CLS] t [SEP] d [SEP]`` and RoBERTa's ``<s> t </s></s> d </s>`` alike; special tokens belong
to neither segment. Truncation is ``longest_first``: a short title is kept whole and the
description gives up the tokens that do not fit.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedTokenizerBase

from metricbert_trainer.base.collator import never_masked
from metricbert_trainer.recobert.forward import PAIR_ENCODER_KEYS


def encode_pairs(
    tokenizer: PreTrainedTokenizerBase,
    titles: Sequence[str],
    descriptions: Sequence[str],
    *,
    max_length: int,
    pad_to_multiple_of: int | None = None,
) -> dict[str, torch.Tensor]:
    """Tokenizes ``(titles[i], descriptions[i])`` pairs into one padded batch.

    Returns ``input_ids``, ``attention_mask``, ``token_type_ids`` (when the tokenizer makes them),
    ``special_tokens_mask`` (special and padding positions, never masked for MLM) and the boolean
    ``title_mask`` / ``description_mask`` over each field's own tokens.
    """
    if len(titles) != len(descriptions):
        raise ValueError(f"Got {len(titles)} titles but {len(descriptions)} descriptions.")
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError(
            f"{type(tokenizer).__name__} is not a fast (tokenizers-backed) tokenizer; RecoBERT needs one to "
            "tell the title's tokens from the description's."
        )
    encoded = tokenizer(
        list(titles),
        list(descriptions),
        truncation="longest_first",
        max_length=max_length,
        padding="longest",
        pad_to_multiple_of=pad_to_multiple_of,
        return_special_tokens_mask=True,
        return_tensors="pt",
    )
    # -1 marks special and padding positions; 0 and 1 are the title's and the description's tokens.
    segments = torch.tensor(
        [
            [-1 if index is None else index for index in encoded.sequence_ids(row)]
            for row in range(len(titles))
        ],
        dtype=torch.long,
    ).reshape(encoded["input_ids"].shape)
    batch = {name: encoded[name] for name in PAIR_ENCODER_KEYS if name in encoded}
    batch["special_tokens_mask"] = never_masked(tokenizer, encoded)
    batch["title_mask"] = segments == 0
    batch["description_mask"] = segments == 1
    return batch
