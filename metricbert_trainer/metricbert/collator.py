"""MetricBERT's collator: tokenizes every text field of a batch of catalog items and masks it for MLM."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from metricbert_trainer.base.collator import (
    CatalogCollator,
    batch_generator,
    batch_slots,
    draw_field_pairs,
    field_key,
    never_masked,
)


@dataclass
class MetricBertCollator(CatalogCollator):
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

    def __post_init__(self) -> None:
        super().__post_init__()
        batch_slots(self.fields)  # at least two fields

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
