"""An encoding that survives being stopped: the vectors encoded so far kept beside the cache a
chunk at a time, and read back by the next call instead of encoded again.

Encoding the two million texts of a million items takes hours on a CPU (docs/scale_out.md), and
the embedding cache is written once, whole, at the end: a call stopped in its last hour (a job's
time limit, a restart, Ctrl-C, the machine out of memory) left nothing the next call could use.
So a call that writes a cache encodes what it must (the catalog's texts, or the texts an earlier
cache lacks) ``CHUNK_TEXTS`` distinct texts at a time, and keeps each chunk's vectors under their
texts' digests in a folder beside the cache (``progress_folder``: ``items.npz`` gives
``items.encoding/``) as soon as the chunk is encoded, each written whole (``write_npz_whole``), so
that a stopped call leaves whole chunks or none. The next call with the same model and
``max_length`` (``model_fingerprint``) reads back the chunks' vectors of the texts it needs and
encodes the rest; chunks of another model or length are not read. Once the cache is written the
folder is removed.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from metricbert_trainer.evaluation.embedding_cache import (
    UNREADABLE,
    digest_matrix,
    text_digests,
    write_npz_whole,
)

logger = logging.getLogger(__name__)

# Distinct texts encoded between two kept chunks: 48 MiB of MiniLM vectors, a few minutes of
# encoding on 2 CPU cores (at most what a stopped call loses), 61 chunk files at a million items.
CHUNK_TEXTS = 32_768


def progress_folder(cache_path: str | Path) -> Path:
    """The folder beside the cache ``cache_path`` that keeps an unfinished encoding's chunks."""
    cache_path = Path(cache_path)
    return cache_path.with_name(f"{cache_path.stem}.encoding")


class EncodingProgress:
    """The chunks kept in ``folder`` by calls that encoded for the model of ``model_fingerprint``
    (``embedding_cache.embedding_fingerprints``), and the encoding of what they lack."""

    def __init__(self, folder: Path, model_fingerprint: str, chunk_texts: int | None = None) -> None:
        self.folder, self.model_fingerprint = folder, model_fingerprint
        self.chunk_texts = chunk_texts or CHUNK_TEXTS

    def encoded(
        self, texts: Sequence[str], encode: Callable[[list[str]], np.ndarray], width: int
    ) -> np.ndarray:
        """The ``[len(texts), width]`` float32 vectors of ``texts``, in order: those of the texts
        a kept chunk holds read back, the other distinct texts encoded by ``encode``
        ``chunk_texts`` at a time, each chunk kept before the next is encoded."""
        keys = digest_matrix(text_digests(texts)).view("V16")[:, 0]
        unique, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        vectors = np.empty((len(texts), width), dtype=np.float32)
        found = np.zeros(len(unique), dtype=bool)
        for digests, stored in self._chunks():
            at = np.minimum(np.searchsorted(unique, digests), len(unique) - 1)
            held = (unique[at] == digests) & ~found[at]
            _scatter(vectors, inverse, at[held], stored[held])
            found[at[held]] = True
        if found.any():
            logger.info(
                "Resuming an encoding stopped before: %d of %d distinct texts read back from %s.",
                found.sum(), len(unique), self.folder,
            )  # fmt: skip
        pending = np.flatnonzero(~found)
        for start in range(0, len(pending), self.chunk_texts):
            part = pending[start : start + self.chunk_texts]
            encoded = np.asarray(encode([texts[position] for position in first[part]]), dtype=np.float32)
            self._keep(unique[part], encoded)
            _scatter(vectors, inverse, part, encoded)
        return vectors

    def remove(self) -> None:
        """The folder and its chunks gone: the cache they were kept for is written."""
        shutil.rmtree(self.folder, ignore_errors=True)

    def _keep(self, digests: np.ndarray, vectors: np.ndarray) -> None:
        created = not self.folder.exists()
        self.folder.mkdir(parents=True, exist_ok=True)
        numbers = [int(path.stem.removeprefix("chunk-")) for path in self.folder.glob("chunk-*.npz")]
        try:
            write_npz_whole(
                self.folder / f"chunk-{max(numbers, default=-1) + 1:06d}.npz",
                model_fingerprint=np.array(self.model_fingerprint),
                digests=digests.view(np.uint8).reshape(-1, 16),
                vectors=vectors,
            )
        except BaseException:
            if created:  # a full disk leaves no empty folder beside the cache
                shutil.rmtree(self.folder, ignore_errors=True)
            raise

    def _chunks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Each readable chunk of this model: its texts' digests and their vectors."""
        for path in sorted(self.folder.glob("chunk-*.npz")) if self.folder.is_dir() else ():
            try:
                with np.load(path, allow_pickle=False) as chunk:
                    if str(chunk["model_fingerprint"]) != self.model_fingerprint:
                        continue
                    digests = np.ascontiguousarray(chunk["digests"]).view("V16")[:, 0]
                    vectors = chunk["vectors"]
            except UNREADABLE as error:
                logger.warning("Skipping %s, which cannot be read (%s).", path, error)
                continue
            yield digests, vectors


def _scatter(vectors: np.ndarray, inverse: np.ndarray, distinct: np.ndarray, rows: np.ndarray) -> None:
    """``rows[i]`` written to every row of ``vectors`` whose text is the distinct text ``distinct[i]``
    (``inverse``: each text's distinct text)."""
    slot = np.full(inverse.max(initial=-1) + 1, -1, dtype=np.int64)
    slot[distinct] = np.arange(len(distinct))
    chosen = np.flatnonzero(slot[inverse] >= 0)
    vectors[chosen] = rows[slot[inverse[chosen]]]
