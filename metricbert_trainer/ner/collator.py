"""The NER collator: tagged titles as word pieces with aligned labels, and their descriptions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from metricbert_trainer.base.collator import CatalogCollator, field_key
from metricbert_trainer.ner.tagging import align_labels

# The tensors of one tokenized text that the encoder takes.
ENCODER_KEYS = ("input_ids", "attention_mask", "token_type_ids")


def encode_words(
    tokenizer, words: list[list[str]], *, max_length: int, pad_to_multiple_of: int | None = None
):
    """Tokenizes titles given as words (``is_split_into_words``), padded into one batch; the
    result's ``word_ids(row)`` map each piece back to its word."""
    return tokenizer(
        words,
        is_split_into_words=True,
        truncation=True,
        max_length=max_length,
        padding="longest",
        pad_to_multiple_of=pad_to_multiple_of,
        return_tensors="pt",
    )


@dataclass
class NerCollator(CatalogCollator):
    """Turns tagged items (``tokens``, ``tags``, and the description field) into a batch.

    The title's words are tokenized as given and each word's tag labels its first word piece;
    later pieces, special tokens and padding get -100 (``tagging.align_labels``), so the loss
    and the metrics count each word once. With ``descriptions`` the batch also holds the second
    field tokenized on its own (``description_input_ids``, ...), for the metric term.

    Example:
        >>> collator = NerCollator(tokenizer, label2id={"O": 0, "B-WINERY": 1, "I-WINERY": 2})
        >>> batch = collator(items)  # input_ids, attention_mask, labels, description_input_ids, ...
    """

    mlm_probability: float = 0.0
    label2id: dict[str, int] = field(default_factory=dict, kw_only=True)
    descriptions: bool = field(default=True, kw_only=True)

    def __post_init__(self) -> None:
        if not self.label2id:
            raise ValueError("NerCollator needs label2id, the model's labels.")
        if not getattr(self.tokenizer, "is_fast", False):
            raise ValueError(
                f"{type(self.tokenizer).__name__} is not a fast tokenizer; aligning tags with word pieces needs one."
            )
        super().__post_init__()

    def torch_call(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        encoded = encode_words(
            self.tokenizer,
            [list(feature["tokens"]) for feature in features],
            max_length=self.max_length,
            pad_to_multiple_of=self.pad_to_multiple_of,
        )
        batch = {name: encoded[name] for name in ENCODER_KEYS if name in encoded}
        batch["labels"] = torch.tensor(
            [
                align_labels(encoded.word_ids(row), [self.label2id[tag] for tag in feature["tags"]])
                for row, feature in enumerate(features)
            ],
            dtype=torch.long,
        )
        if self.descriptions:
            description = self.fields[1]
            texts = self.tokenizer(
                [str(feature[description]) for feature in features],
                truncation=True,
                max_length=self.max_length,
                padding="longest",
                pad_to_multiple_of=self.pad_to_multiple_of,
                return_tensors="pt",
            )
            batch.update(
                {field_key(description, name): texts[name] for name in ENCODER_KEYS if name in texts}
            )
        return batch
