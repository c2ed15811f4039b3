"""TF-IDF over the tokenizer's word pieces, for the hybrid teacher (``losses.teacher``).

The teacher fuses the frozen starting encoder with TF-IDF, as the hybrid ranking does
(``evaluation.hybrid``), but it must score every batch of training inputs, which reach the loss as
token ids (masked ones restored by ``collator.unmasked``), not as texts. So its TF-IDF counts
the word pieces of those ids, with one inverse document frequency per field fitted on the
training catalog: no second tokenizer, no text lookup, and a batch's vectors cost one scatter.
Word pieces are close to words for the rare names TF-IDF is there for (a grape, a library); the
special tokens ([CLS], [SEP], padding) are not counted. As the hybrid ranking's ``tfidf_mode``, the
teacher compares each field with its own (``metric_inf``) or an item's fields joined into one bag of
word pieces (``concat``, under the key ``JOINED``), so that a word one item's title shares with
another's description counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum

import numpy as np
import torch
from scipy import sparse
from sklearn.preprocessing import normalize
from transformers import PreTrainedTokenizerBase

from metricbert_trainer.data.token_rows import TokenRows

# The key of the joined fields' document frequencies in ``TokenTfidf.idf``.
JOINED = "joined"
# What a field's batch inputs hold that its TF-IDF reads.
INPUT_KEYS = ("input_ids", "attention_mask")


class TeacherTfidfMode(str, Enum):
    """Which texts the teacher's TF-IDF compares, named as the hybrid ranking's ``tfidf_mode``.
    ``metric_inf``: each field with its own, the fields' distances summed. ``concat``: an item's
    fields joined, one bag of word pieces over one set of document frequencies."""

    METRIC_INF = "metric_inf"
    CONCAT = "concat"


def joined_counts(counts: Sequence[sparse.csr_matrix]) -> sparse.csr_matrix:
    """Each item's word-piece counts over all its fields: the fields' ``TokenRows.counts``, row
    for row one item, summed."""
    return sum(counts[1:], counts[0]).tocsr()


class TokenTfidf:
    """Per-field inverse document frequencies over word-piece ids, and the batch vectors they weigh.

    As scikit-learn's ``TfidfVectorizer`` defaults: raw counts, ``idf = ln((1 + n) / (1 + df)) + 1``,
    each vector scaled to unit length.
    """

    def __init__(self, idf: dict[str, torch.Tensor], ignored_ids: Sequence[int]) -> None:
        self.idf = idf
        self.ignored_ids = torch.tensor(sorted(set(ignored_ids)), dtype=torch.long)

    @classmethod
    def fit(cls, counts: Mapping[str, sparse.csr_matrix], ignored_ids: Sequence[int]) -> TokenTfidf:
        """Per field, in how many texts each word piece occurs: ``counts[field]`` is
        ``TokenRows.counts`` of the field's texts as the training collator truncates them."""
        idf = {}
        for name, field_counts in counts.items():
            documents, vocabulary = field_counts.shape
            frequency = np.bincount(field_counts.indices, minlength=vocabulary).astype(np.float64)
            frequency[list(ignored_ids)] = 0
            idf[name] = (torch.log((1 + documents) / (1 + torch.from_numpy(frequency))) + 1).float()
        return cls(idf, ignored_ids)

    def vectors(self, field: str, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """``[batch, vocabulary]`` unit-length TF-IDF vectors of one field's (unmasked) inputs; for
        ``JOINED``, each item's fields side by side along the tokens (the bag ignores their order)."""
        idf = self.idf[field].to(input_ids.device)
        counted = attention_mask.bool() & ~torch.isin(input_ids, self.ignored_ids.to(input_ids.device))
        counts = torch.zeros(len(input_ids), len(idf), device=input_ids.device)
        counts.scatter_add_(1, input_ids, counted.float())
        weighted = counts * idf
        return weighted / weighted.norm(dim=1, keepdim=True).clamp_min(1e-12)

    def batch_views(self, fields: Mapping[str, Mapping[str, torch.Tensor]]) -> list[torch.Tensor]:
        """The ``vectors`` a batch is compared by: one per field of ``fields`` (each field's unmasked
        ``input_ids`` and ``attention_mask``), or one of the fields joined when fitted on ``JOINED``."""
        if JOINED in self.idf:
            joined = {key: torch.cat([field[key] for field in fields.values()], dim=1) for key in INPUT_KEYS}
            fields = {JOINED: joined}
        return [
            self.vectors(name, field["input_ids"], field["attention_mask"]) for name, field in fields.items()
        ]

    def catalog_views(self, counts: Mapping[str, sparse.csr_matrix]) -> list[sparse.csr_matrix]:
        """``batch_views`` for a whole catalog: ``catalog_vectors`` of each field's ``counts``, or of
        their ``joined_counts`` when fitted on ``JOINED``."""
        if JOINED in self.idf:
            counts = {JOINED: joined_counts(list(counts.values()))}
        return [self.catalog_vectors(name, field_counts) for name, field_counts in counts.items()]

    def catalog_vectors(self, field: str, counts: sparse.csr_matrix) -> sparse.csr_matrix:
        """``[N, vocabulary]`` sparse unit-length vectors of a whole catalog's texts of one field
        from their ``TokenRows.counts``, row for row what ``vectors`` gives a batch of them (the
        same truncation, weights and ignored ids): dense rows of the vocabulary's width would not
        fit for a large catalog."""
        idf = self.idf[field].numpy().copy()
        idf[self.ignored_ids.numpy()] = 0  # special tokens carry no weight
        # A repeated word piece weighs its count times its idf.
        matrix = sparse.csr_matrix(counts.multiply(idf[None, :]), dtype=np.float32)
        matrix.eliminate_zeros()
        return normalize(matrix)


def fitted_catalog_vectors(
    tokenizer: PreTrainedTokenizerBase, columns: Mapping[str, Sequence[str]], max_length: int
) -> tuple[TokenTfidf, list[sparse.csr_matrix]]:
    """The teacher's TF-IDF fitted on a catalog's ``columns`` (texts per field) and each field's
    ``catalog_vectors``, the texts tokenized once: what a training run lists its shared neighbours
    with, for measuring the lists outside one (``benchmarks/``)."""
    counts = {
        name: TokenRows.tokenize(tokenizer, texts, max_length).counts(len(tokenizer))
        for name, texts in columns.items()
    }
    tfidf = TokenTfidf.fit(counts, tokenizer.all_special_ids)
    return tfidf, [tfidf.catalog_vectors(name, field_counts) for name, field_counts in counts.items()]
