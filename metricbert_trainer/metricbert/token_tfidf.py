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

from collections.abc import Iterator, Sequence

import numpy as np
import torch
from scipy import sparse
from sklearn.preprocessing import normalize
from transformers import PreTrainedTokenizerBase

from metricbert_trainer.data.lengths import catalog_token_ids


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
            counts = token_counts(tokenizer, field_texts, max_length, vocabulary)
            frequency = torch.from_numpy(np.bincount(counts.indices, minlength=vocabulary).astype(np.float64))
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

    def catalog_vectors(
        self, field: str, tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], max_length: int
    ) -> sparse.csr_matrix:
        """``[N, vocabulary]`` sparse unit-length vectors of a whole catalog's texts of one field,
        row for row what ``vectors`` gives a batch of them (the same truncation, weights and
        ignored ids): dense rows of the vocabulary's width would not fit for a large catalog."""
        idf = self.idf[field].numpy().copy()
        idf[self.ignored_ids.numpy()] = 0  # special tokens carry no weight
        counts = token_counts(tokenizer, texts, max_length, len(idf))
        # A repeated word piece weighs its count times its idf.
        matrix = sparse.csr_matrix(counts.multiply(idf[None, :]), dtype=np.float32)
        matrix.eliminate_zeros()
        return normalize(matrix)


def token_counts(
    tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], max_length: int, vocabulary: int
) -> sparse.csr_matrix:
    """``[N, vocabulary]`` counts of each text's word pieces (special tokens included), as the
    collators truncate them. Built from flat int32 arrays: Python lists of every token of a million
    descriptions held several GiB, and a torch call per text cost seconds per 100,000 texts."""
    lengths = np.empty(len(texts), dtype=np.int64)

    def flat_ids() -> Iterator[int]:
        for row, ids in enumerate(catalog_token_ids(tokenizer, texts, max_length)):
            lengths[row] = len(ids)
            yield from ids

    columns = np.fromiter(flat_ids(), dtype=np.int32)
    rows = np.repeat(np.arange(len(texts), dtype=np.int32), lengths)
    counts = sparse.csr_matrix(
        (np.ones(len(columns), dtype=np.float32), (rows, columns)), shape=(len(texts), vocabulary)
    )
    counts.sum_duplicates()
    return counts
