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
from metricbert_trainer.metricbert.description_views import (
    DESCRIPTION_VIEW,
    SECOND_DESCRIPTION_VIEW,
    ViewPartner,
    description_view,
    disjoint_description_views,
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

    ``description_view_words > 0`` (two-field catalogs) adds a third slot, ``description_view``:
    per item a window of at most that many contiguous words of its description, drawn from the
    same generator (``description_views``), tokenized and masked like the fields; with
    ``description_view_partner="view"`` the window comes from the description's first half and a
    fourth slot, ``description_view_2``, holds one from its second half.

    Example:
        >>> collator = MetricBertCollator(tokenizer, fields=("title", "description"))
        >>> batch = collator([{"title": "Rainstorm 2013 Pinot Gris", "description": "Tart and snappy."}])
    """

    description_view_words: int = 0
    description_view_partner: ViewPartner = ViewPartner.DESCRIPTION

    def __post_init__(self) -> None:
        super().__post_init__()
        batch_slots(self.fields)  # at least two fields
        if self.description_view_words < 0:
            raise ValueError(f"description_view_words must be >= 0; got {self.description_view_words}.")
        if self.description_view_words and len(self.fields) != 2:
            raise ValueError(
                "description_view_words draws views of the description of a (title, description) catalog; "
                f"this one has the fields {tuple(self.fields)}."
            )

    def torch_call(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        batch: dict[str, torch.Tensor] = {}
        texts_by_field = {name: [str(feature[name]) for feature in features] for name in self.fields}
        draws_pairs = len(self.fields) > 2  # batch_slots: the pair goes into PAIR_SLOTS
        # Without pairs to draw, views or masks, the batch needs no randomness.
        if draws_pairs or self.description_view_words or self._masker is not None:
            generator = batch_generator(
                self.seed, [text for texts in texts_by_field.values() for text in texts]
            )
            if draws_pairs:
                texts_by_field = draw_field_pairs(list(texts_by_field.values()), generator)
            if self.description_view_words:
                texts_by_field.update(self._views(texts_by_field[self.fields[1]], generator))
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

    def _views(self, descriptions: list[str], generator: torch.Generator) -> dict[str, list[str]]:
        """The view slots' texts: one window per description, or a disjoint pair of them."""
        if ViewPartner(self.description_view_partner) is ViewPartner.DESCRIPTION:
            return {
                DESCRIPTION_VIEW: [
                    description_view(text, self.description_view_words, generator) for text in descriptions
                ]
            }
        pairs = [
            disjoint_description_views(text, self.description_view_words, generator) for text in descriptions
        ]
        return {
            DESCRIPTION_VIEW: [first for first, _ in pairs],
            SECOND_DESCRIPTION_VIEW: [second for _, second in pairs],
        }
