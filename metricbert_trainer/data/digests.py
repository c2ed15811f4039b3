"""Feeding texts and a catalog's content to a hash, the same way for every cache fingerprint.

Each cache that is computed from a catalog (embeddings, TF-IDF matrices, shared-neighbour lists,
and the cache folder's file names) files its result under a digest of what it depends on. The
texts go in length-prefixed, so that no two different sequences of texts feed the same bytes
("ab", "c" against "a", "bc"), and a catalog goes in column by column, so that moving a text from
one field to another changes the digest.
"""

from __future__ import annotations

from typing import Protocol

from metricbert_trainer.data.catalog import Catalog


class Digest(Protocol):
    """What ``hashlib``'s hashes offer and these functions use."""

    def update(self, data: bytes, /) -> None: ...


def add_text(digest: Digest, text: str) -> None:
    """``text`` in UTF-8, after its length in bytes (8 bytes, little-endian)."""
    data = text.encode("utf-8")
    digest.update(len(data).to_bytes(8, "little") + data)


def add_catalog(digest: Digest, catalog: Catalog) -> None:
    """The id column's name and ids, then each field's name and texts, in the catalog's order."""
    for column in ("id", *catalog.fields):
        add_text(digest, column)
        for text in catalog.column(column):
            add_text(digest, text)
