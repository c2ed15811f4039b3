"""The hybrid ranking's TF-IDF matrices kept in an .npz, so a command run again does not refit them.

``evaluate`` and ``recommend`` fuse the encoder with TF-IDF fitted on the whole catalog. The
encoder's vectors are kept in ``--cache``; the TF-IDF fit was redone on every call, and at a
million items it was the slowest part of a ``recommend`` whose vectors and shared-neighbour lists
were cached (docs/scale_out.md). The matrices are kept beside the embedding cache
(``items.npz`` -> ``items.tfidf.npz``) as their CSR arrays, under a fingerprint of the texts and
of the vectoriser's settings, and read back exactly as they were fitted.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path

import numpy as np
import sklearn
from scipy import sparse

from metricbert_trainer.data.digests import add_text
from metricbert_trainer.evaluation.embedding_cache import (
    check_cache_file,
    npz_names,
    read_fingerprinted_npz,
    write_npz_whole,
)

logger = logging.getLogger(__name__)

# Changes whenever the matrices' meaning or the archive's layout does, so that older caches are refitted.
TFIDF_FORMAT = "tfidf-matrices-1"
# The arrays each view's CSR matrix is stored as, under "view:NAME:PART".
CSR_PARTS = ("data", "indices", "indptr", "shape")


def tfidf_cache_beside(embedding_cache: str | Path) -> Path:
    """Where ``evaluate`` and ``recommend`` keep the TF-IDF matrices: beside their ``--cache``
    (``items.npz`` -> ``items.tfidf.npz``)."""
    embedding_cache = Path(embedding_cache)
    return embedding_cache.with_name(f"{embedding_cache.stem}.tfidf.npz")


def is_tfidf_cache(path: Path) -> bool:
    """Whether ``path`` is an .npz archive of TF-IDF matrices this module wrote."""
    names = npz_names(path)
    return (
        names is not None
        and "fingerprint" in names
        and all(
            name == "fingerprint" or (name.startswith("view:") and name.rsplit(":", 1)[-1] in CSR_PARTS)
            for name in names
        )
    )


def check_tfidf_cache_path(path: str | Path) -> Path:
    """``path`` as a ``Path``, after a ``UsageError`` when it names a folder or a file that is not
    a TF-IDF cache, or cannot be written: a cache never replaces a user's file."""
    return check_cache_file(
        path, kind="TF-IDF cache", is_cache=is_tfidf_cache, instead="move it, or name another embedding cache"
    )


def tfidf_fingerprint(settings: Mapping[str, object], views: Mapping[str, Sequence[str]]) -> str:
    """A hex digest of what the matrices depend on: the vectoriser's ``settings``, scikit-learn's
    version, and each view's name and texts in order."""
    digest = hashlib.blake2b(digest_size=20)

    add = partial(add_text, digest)

    add(TFIDF_FORMAT)
    add(json.dumps({**settings, "scikit-learn": sklearn.__version__}, sort_keys=True, default=str))
    for name, texts in views.items():
        add(f"{name} {len(texts)}")
        for text in texts:
            add(text)
    return digest.hexdigest()


def cached_tfidf(
    path: str | Path,
    settings: Mapping[str, object],
    views: Mapping[str, Sequence[str]],
    fit: Callable[[Sequence[str]], sparse.csr_matrix],
) -> dict[str, sparse.csr_matrix]:
    """Each view's TF-IDF matrix, read from ``path`` when it holds them for these ``views`` and
    ``settings``, else ``fit`` on each view's texts and written there (replacing only a cache)."""
    path = check_tfidf_cache_path(path)
    fingerprint = tfidf_fingerprint(settings, views)
    stored = _read(path, fingerprint, list(views))
    if stored is not None:
        logger.info("Reusing the TF-IDF matrices of %s.", path)
        return stored
    matrices = {name: sparse.csr_matrix(fit(texts)) for name, texts in views.items()}
    arrays = {
        f"view:{name}:{part}": np.asarray(matrix.shape if part == "shape" else getattr(matrix, part))
        for name, matrix in matrices.items()
        for part in CSR_PARTS
    }
    write_npz_whole(path, fingerprint=np.array(fingerprint), **arrays)
    logger.info("Wrote the TF-IDF matrices to %s.", path)
    return matrices


def _read(path: Path, fingerprint: str, names: list[str]) -> dict[str, sparse.csr_matrix] | None:
    stored = read_fingerprinted_npz(
        path,
        fingerprint,
        [f"view:{name}:{part}" for name in names for part in CSR_PARTS],
        holds="the TF-IDF of another catalog or setting",
        cache="TF-IDF cache",
        again="fitting again",
        log=logger,
    )
    if stored is None:
        return None
    return {
        name: sparse.csr_matrix(
            tuple(stored[f"view:{name}:{part}"] for part in ("data", "indices", "indptr")),
            shape=tuple(stored[f"view:{name}:shape"]),
        )
        for name in names
    }
