"""What the collators share: field-keyed batch layout, BERT masking, and per-batch random draws.

``metricbert.collator`` and ``recobert.collator`` build on these; ``base.modeling`` and the
MetricBERT forward read batches back through ``field_inputs`` and ``unmasked``."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerBase
from transformers.data.data_collator import DataCollatorMixin

# Keys of one field's tensors in a collated batch, e.g. ``title_input_ids``.
TENSOR_KEYS = ("input_ids", "attention_mask", "token_type_ids", "labels")
# A batch of items with more than two text fields holds, per item, two of them drawn at random.
PAIR_SLOTS = ("anchor", "positive")


def batch_slots(fields: Sequence[str]) -> tuple[str, str]:
    """The names a collated batch gives its two texts per item: the fields themselves for a
    two-field catalog, ``PAIR_SLOTS`` when each item's pair is drawn from more fields."""
    if len(fields) < 2:
        raise ValueError(f"Training pairs two text fields of an item; got {tuple(fields)}.")
    return tuple(fields) if len(fields) == 2 else PAIR_SLOTS


def field_key(field_name: str, tensor_name: str) -> str:
    return f"{field_name}_{tensor_name}"


def field_inputs(batch: dict[str, torch.Tensor], field_name: str) -> dict[str, torch.Tensor]:
    """The tensors of one field, with their plain names (``input_ids``, ``labels``, ...)."""
    return {
        name: batch[field_key(field_name, name)]
        for name in TENSOR_KEYS
        if field_key(field_name, name) in batch
    }


def unmasked(inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """One field's encoder inputs with the original tokens restored and no labels.

    The labels hold the original token wherever one was masked (replaced, randomised or kept),
    so the text the model would see at inference is recoverable without a second tokenization.
    """
    clean = {name: tensor for name, tensor in inputs.items() if name != "labels"}
    labels = inputs.get("labels")
    if labels is not None:
        clean["input_ids"] = torch.where(labels != -100, labels, inputs["input_ids"])
    return clean


def batch_generator(seed: int, texts: Sequence[str]) -> torch.Generator:
    """A random generator seeded by ``seed`` and the batch's texts, in order.

    Masks and drawn pairs then depend on the batch alone, not on how many batches were drawn
    before it. That is what lets a resumed run draw exactly what the uninterrupted run drew:
    accelerate's data loader collates one batch ahead of the training step, so the global RNG
    state a checkpoint saves has already served the next batch. Shuffling reorders a batch's
    items every epoch, so a catalog smaller than a batch still gets fresh masks each epoch.
    """
    digest = hashlib.blake2b(str(seed).encode(), digest_size=8)
    for text in texts:
        digest.update(text.encode("utf-8", "surrogatepass") + b"\0")
    return torch.Generator().manual_seed(int.from_bytes(digest.digest(), "little") >> 1)


def never_masked(tokenizer: PreTrainedTokenizerBase, encoded: dict[str, torch.Tensor]) -> torch.Tensor:
    """Positions MLM must not mask: special tokens (those the tokenizer added, and [UNK] or any other
    special token that came from the text itself, which ``return_special_tokens_mask`` leaves out)
    and padding."""
    special_ids = torch.tensor(tokenizer.all_special_ids, dtype=encoded["input_ids"].dtype)
    return (
        encoded["special_tokens_mask"].bool()
        | torch.isin(encoded["input_ids"], special_ids)
        | (encoded["attention_mask"] == 0)
    )


def draw_field_pairs(columns: list[list[str]], generator: torch.Generator) -> dict[str, list[str]]:
    """Per item, two distinct fields in random order: ``{"anchor": [...], "positive": [...]}``.

    ``columns`` holds one list of texts per field, all of the same length.
    """
    order = torch.rand(len(columns[0]), len(columns), generator=generator).argsort(dim=1)
    return {
        slot: [columns[field][item] for item, field in enumerate(order[:, position].tolist())]
        for position, slot in enumerate(PAIR_SLOTS)
    }


def build_masker(
    tokenizer: PreTrainedTokenizerBase, mlm_probability: float
) -> DataCollatorForLanguageModeling | None:
    """transformers' BERT masking recipe at ``mlm_probability``, or ``None`` when it is 0."""
    if not 0.0 <= mlm_probability < 1.0:
        raise ValueError(f"mlm_probability must be in [0, 1); got {mlm_probability}.")
    if mlm_probability == 0:
        return None
    if tokenizer.mask_token is None:
        raise ValueError(
            "The tokenizer has no mask token, so it cannot be used for MLM; set mlm_probability=0."
        )
    return DataCollatorForLanguageModeling(tokenizer, mlm_probability=mlm_probability)


@dataclass
class CatalogCollator(DataCollatorMixin):
    """What every collator of catalog items holds and checks: the tokenizer, the text fields, the
    truncation and padding lengths, MLM masking and the seed of its per-batch draws.

    A subclass writes ``torch_call`` and adds its own fields; checks that would otherwise fail at the
    first batch, after the model has loaded, happen here when the collator is built.
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
        self._masker = build_masker(self.tokenizer, self.mlm_probability)
