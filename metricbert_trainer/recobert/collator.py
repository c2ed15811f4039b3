"""The RecoBERT collator: (title, description) pairs, half of them mismatched, masked for MLM."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from metricbert_trainer.base.collator import CatalogCollator, batch_generator
from metricbert_trainer.recobert.pairs import encode_pairs


@dataclass
class RecoBertCollator(CatalogCollator):
    """Turns catalog items into RecoBERT's title-description matching examples.

    Row ``i`` pairs item ``i``'s title with its own description (``tdm_labels[i] = 1``) or, with
    probability ``negative_probability``, with the description of another item of the batch drawn
    uniformly (label 0). The trainer shuffles the catalog, so a batch is a random sample of it and
    "another item of the batch" is a random other catalog item, without the collator holding the
    catalog. A drawn description whose text equals the item's own is labelled 1: it is a match.
    Each pair is one joint input (``recobert.pairs.encode_pairs``) with ``title_mask`` and
    ``description_mask`` over its two segments; ``mlm_probability`` of its real tokens are masked
    with BERT's 80/10/10 recipe (``labels``, -100 elsewhere). Partners and masks are drawn from
    ``base.collator.batch_generator(seed, texts)``, so a resumed run draws what the uninterrupted run drew.

    Example:
        >>> collator = RecoBertCollator(tokenizer)
        >>> batch = collator(items)  # input_ids, ..., title_mask, description_mask, labels, tdm_labels
    """

    max_length: int = 256
    # Keyword-only: as a field of the subclass it comes after the base class's fields.
    negative_probability: float = field(default=0.5, kw_only=True)

    def __post_init__(self) -> None:
        if len(self.fields) != 2:
            raise ValueError(f"RecoBERT pairs exactly two fields (title, description); got {self.fields}.")
        if not 0.0 <= self.negative_probability <= 1.0:
            raise ValueError(f"negative_probability must be in [0, 1]; got {self.negative_probability}.")
        super().__post_init__()

    def torch_call(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        title_field, description_field = self.fields
        titles = [str(feature[title_field]) for feature in features]
        descriptions = [str(feature[description_field]) for feature in features]
        generator = batch_generator(self.seed, titles + descriptions)
        partners = self.draw_partners(len(features), generator)
        paired = [descriptions[j] for j in partners.tolist()]
        labels = torch.tensor(
            [float(paired[i] == descriptions[i]) for i in range(len(features))], dtype=torch.float32
        )
        batch = encode_pairs(
            self.tokenizer,
            titles,
            paired,
            max_length=self.max_length,
            pad_to_multiple_of=self.pad_to_multiple_of,
        )
        never_masked = batch.pop("special_tokens_mask")
        if self._masker is not None:
            self._masker.generator = generator
            batch["input_ids"], batch["labels"] = self._masker.torch_mask_tokens(
                batch["input_ids"], special_tokens_mask=never_masked
            )
        batch["tdm_labels"] = labels
        return batch

    def draw_partners(self, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        """Row ``i``'s description comes from row ``partners[i]``: itself, or another row."""
        partners = torch.arange(batch_size)
        if batch_size < 2:
            return partners
        negative = torch.rand(batch_size, generator=generator) < self.negative_probability
        # An offset in [1, batch_size) from i lands uniformly on the other rows.
        offsets = torch.randint(1, batch_size, (batch_size,), generator=generator)
        return torch.where(negative, (partners + offsets) % batch_size, partners)
