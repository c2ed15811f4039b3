"""TF-IDF over the tokenizer's word pieces, for the hybrid teacher (``losses.teacher``).

The teacher fuses the frozen starting encoder with TF-IDF, as the hybrid ranking does
(``evaluation.hybrid``), but it must score every batch of training inputs, which reach the loss as
token ids (masked ones restored by ``collator.unmasked``), not as texts. So its TF-IDF counts
the word pieces of those ids, with one inverse document frequency per field fitted on the
training catalog: no second tokenizer, no text lookup, and a batch's vectors cost one scatter.
Word pieces are close to words for the rare names TF-IDF is there for (a grape, a library); the
special tokens ([CLS], [SEP], padding) are not counted.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedTokenizerBase

from metricbert_trainer.base.collator import truncated_token_ids


class TokenTfidf:
    """Per-field inverse document frequencies over word-piece ids, and the batch vectors they weigh.

    As scikit-learn's ``TfidfVectorizer`` defaults: raw counts, ``idf = ln((1 + n) / (1 + df)) + 1``,
    each vector scaled to unit length.
    """

    def __init__(self, idf: dict[str, torch.Tensor], ignored_ids: Sequence[int]) -> None:
        self.idf = idf
        self.ignored_ids = torch.tensor(sorted(set(ignored_ids)), dtype=torch.long)

    @classmethod
    def fit(
        cls, tokenizer: PreTrainedTokenizerBase, texts: dict[str, Sequence[str]], max_length: int
    ) -> TokenTfidf:
        """Counts, per field, in how many of ``texts[field]`` each word piece occurs, as the
        training collator truncates them (``max_length``)."""
        vocabulary = len(tokenizer)
        ignored = list(tokenizer.all_special_ids)
        idf = {}
        for name, field_texts in texts.items():
            frequency = torch.zeros(vocabulary, dtype=torch.float64)
            for ids in truncated_token_ids(tokenizer, field_texts, max_length):
                frequency[torch.unique(torch.tensor(ids, dtype=torch.long))] += 1
            frequency[ignored] = 0
            documents = len(field_texts)
            idf[name] = (torch.log((1 + documents) / (1 + frequency)) + 1).float()
        return cls(idf, ignored)

    def vectors(self, field: str, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """``[batch, vocabulary]`` unit-length TF-IDF vectors of one field's (unmasked) inputs."""
        idf = self.idf[field].to(input_ids.device)
        counted = attention_mask.bool() & ~torch.isin(input_ids, self.ignored_ids.to(input_ids.device))
        counts = torch.zeros(len(input_ids), len(idf), device=input_ids.device)
        counts.scatter_add_(1, input_ids, counted.float())
        weighted = counts * idf
        return weighted / weighted.norm(dim=1, keepdim=True).clamp_min(1e-12)
