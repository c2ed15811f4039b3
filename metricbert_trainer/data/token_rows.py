"""A catalog field's token ids, tokenized once and held as flat arrays.

Before its first step a MetricBERT run reads the same truncated token ids of every catalog text
for many things: the guide cache's keys and its longest-first order, the keys that find cached
vectors for the batches of neighbourhoods and for the teacher's shared neighbours, the teacher's
TF-IDF (fitted, then each catalog row), the word prior and the truncation report. Each used to
tokenize the whole catalog itself, about eight passes: 67 of the 215 s a 100,000-item run took to
its second step on two cores (benchmarks/RESULTS.md, "Tokenized once"). ``TokenRows`` is one pass,
kept as one array of ids and row offsets (2 or 4 bytes a token, where Python lists of ints cost
about 36), that each of them reads.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from scipy import sparse
from transformers import PreTrainedTokenizerBase

from metricbert_trainer.data.lengths import catalog_token_ids


def token_key(token_ids: Sequence[int] | np.ndarray) -> bytes:
    """What a text is found under by its token ids without padding (the guide's cached vectors, the
    shared neighbours' rows): a 128-bit digest. A tuple of the ids was ~36 bytes per token, more
    than the vectors themselves for long texts (``benchmarks/million_items.py``); a collision among
    2e6 texts has odds below 1e-26."""
    ids = np.asarray(token_ids, dtype=np.int64)
    return hashlib.blake2b(ids.tobytes(), digest_size=16).digest()


def id_dtype(vocabulary: int) -> type[np.integer]:
    """The narrowest dtype that holds every id of a ``vocabulary``-sized tokenizer: 2 bytes a token
    for BERT's, RoBERTa's and MPNet's (30,522-50,265 ids), 4 for larger ones (XLM-R's 250,002).
    Ten million items of 256-token texts hold 10 GiB of ids per process in 2 bytes, 20 in 4."""
    return np.uint16 if vocabulary <= np.iinfo(np.uint16).max + 1 else np.int32


@dataclass(frozen=True)
class TokenRows:
    """The token ids of ``N`` texts (special tokens included), row after row in ``ids`` (``id_dtype``);
    row ``i`` is ``ids[offsets[i]:offsets[i + 1]]``."""

    ids: np.ndarray
    offsets: np.ndarray

    @classmethod
    def tokenize(
        cls, tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], max_length: int | None = None
    ) -> TokenRows:
        """``texts`` tokenized as the collators tokenize them (truncated at ``max_length``; whole
        with ``None``), a chunk at a time (``lengths.catalog_token_ids``)."""
        lengths = np.empty(len(texts), dtype=np.int64)

        def flat_ids():
            for row, ids in enumerate(catalog_token_ids(tokenizer, texts, max_length)):
                lengths[row] = len(ids)
                yield from ids

        ids = np.fromiter(flat_ids(), dtype=id_dtype(len(tokenizer)))
        return cls.from_lengths(ids, lengths)

    @classmethod
    def from_lengths(cls, ids: np.ndarray, lengths: np.ndarray) -> TokenRows:
        """Rows of ``lengths`` ids each, one after another in ``ids``: rows tokenized elsewhere
        (each process of a launch a share of them, ``training.trainer.shared_token_rows``)."""
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return cls(ids, offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        """Tokens per row."""
        return np.diff(self.offsets)

    def row(self, index: int) -> np.ndarray:
        return self.ids[self.offsets[index] : self.offsets[index + 1]]

    @cached_property
    def keys(self) -> list[bytes]:
        """Each row's ``token_key``, as a padded batch of the same texts gives them
        (``guide.batch_token_keys``); computed once, as several lookups need them."""
        return [token_key(self.row(index)) for index in range(len(self))]

    def counts(self, vocabulary: int) -> sparse.csr_matrix:
        """``[N, vocabulary]`` counts of each row's token ids."""
        rows = np.repeat(np.arange(len(self), dtype=np.int32), self.lengths)
        counts = sparse.csr_matrix(
            (np.ones(len(self.ids), dtype=np.float32), (rows, self.ids)), shape=(len(self), vocabulary)
        )
        counts.sum_duplicates()
        return counts
