"""MetricBERT's collator: tokenizes every text field of a batch of catalog items and masks it for MLM."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerBase
from transformers.data.data_collator import DataCollatorMixin

from metricbert_trainer.base.collator import (
    batch_generator,
    batch_slots,
    build_masker,
    draw_field_pairs,
    field_key,
    never_masked,
)


@dataclass
class MetricBertCollator(DataCollatorMixin):
    """Turns catalog items (dicts with one text per field) into masked, padded encoder inputs.

    With two fields, the batch holds both. With more (say title, description, tags), each item
    contributes two distinct fields drawn at random for this batch, in the slots ``anchor`` and
    ``positive`` (``PAIR_SLOTS``): an item's fields all describe it, so any two of them are a
    positive pair, and every pair is seen over the epochs. Below, "field" means a slot then.

    Each field is padded only to its own longest text in the batch (titles are short, descriptions
    long), and comes back as ``{field}_input_ids``, ``{field}_attention_mask``,
    ``{field}_token_type_ids`` (when the tokenizer makes them) and ``{field}_labels``. Row ``i`` of
    every field belongs to item ``i``, which is what the miner relies on to find an anchor's
    positive. Masking is transformers' own BERT recipe (``mlm_probability`` of the real tokens,
    80% ``[MASK]``, 10% random, 10% unchanged); special and padding tokens are never masked and
    labels are -100 everywhere else. ``mlm_probability=0`` returns unmasked inputs and no labels.
    The masks are drawn from ``batch_generator(seed, texts)``, so a batch is masked the same way
    in a resumed run as in an uninterrupted one.

    Example:
        >>> collator = MetricBertCollator(tokenizer, fields=("title", "description"))
        >>> batch = collator([{"title": "Rainstorm 2013 Pinot Gris", "description": "Tart and snappy."}])
    """

    tokenizer: PreTrainedTokenizerBase
    fields: Sequence[str] = ("title", "description")
    max_length: int = 128
    mlm_probability: float = 0.15
    pad_to_multiple_of: int | None = None
    seed: int = 0
    return_tensors: str = "pt"
    _masker: DataCollatorForLanguageModeling | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.pad_to_multiple_of and self.max_length % self.pad_to_multiple_of:
            # transformers would refuse it at the first batch, after the model has loaded.
            raise ValueError(
                f"max_length={self.max_length} is not a multiple of pad_to_multiple_of={self.pad_to_multiple_of}: "
                "texts truncated to max_length could not be padded to a multiple."
            )
        batch_slots(self.fields)  # at least two fields
        self._masker = build_masker(self.tokenizer, self.mlm_probability)

    def torch_call(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        batch: dict[str, torch.Tensor] = {}
        texts_by_field = {name: [str(feature[name]) for feature in features] for name in self.fields}
        draws_pairs = len(self.fields) > 2  # batch_slots: the pair goes into PAIR_SLOTS
        if draws_pairs or self._masker is not None:  # the default recipe needs no randomness
            generator = batch_generator(
                self.seed, [text for texts in texts_by_field.values() for text in texts]
            )
            if draws_pairs:
                texts_by_field = draw_field_pairs(list(texts_by_field.values()), generator)
            if self._masker is not None:
                self._masker.generator = generator
        for name, texts in texts_by_field.items():
            encoded = self.tokenizer(
                texts,
                truncation=True,
                max_length=self.max_length,
                padding="longest",
                pad_to_multiple_of=self.pad_to_multiple_of,
                return_special_tokens_mask=self._masker is not None,
                return_tensors="pt",
            )
            if self._masker is not None:
                protected = never_masked(self.tokenizer, encoded)
                del encoded["special_tokens_mask"]
                encoded["input_ids"], encoded["labels"] = self._masker.torch_mask_tokens(
                    encoded["input_ids"], special_tokens_mask=protected
                )
            for tensor_name, tensor in encoded.items():
                batch[field_key(name, tensor_name)] = tensor
        return batch
