"""The user's cache folder: where a catalog's caches are kept when no cache file is named.

Encoding the catalog is most of an ``evaluate`` or ``recommend`` call, and the same call made again
encodes the same texts with the same model. So the commands keep the embedding cache, and the
TF-IDF and shared-neighbour caches that sit beside one (``tfidf_cache_beside``,
``lists_cache_beside``), in a folder of the user's (``cache_folder``), under a name keyed by what
the vectors depend on (``folder_cache_path``). The key only chooses the file: each cache still
checks its own fingerprint when it is read, so two settings that met on one key would cost an
encoding, never give one setting the other's vectors.

After a call the folder is trimmed to a size (``used_and_trimmed``): the caches used least
recently go first, and only files that this library's cache readers recognise as their own
(``is_embedding_cache``, ``is_tfidf_cache``, ``is_lists_cache``); whatever else a user keeps there
stays.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from pathlib import Path

from metricbert_trainer.data.catalog import Catalog
from metricbert_trainer.data.digests import add_catalog
from metricbert_trainer.data.file_stamps import model_folder_files
from metricbert_trainer.evaluation.embedding_cache import is_embedding_cache
from metricbert_trainer.evaluation.shared_neighbours import is_lists_cache, lists_cache_beside
from metricbert_trainer.evaluation.tfidf_cache import is_tfidf_cache, tfidf_cache_beside

logger = logging.getLogger(__name__)

# The folder the caches go to when set; else $XDG_CACHE_HOME/metricbert, else ~/.cache/metricbert.
CACHE_VARIABLE = "METRICBERT_CACHE"
# What the folder's caches are trimmed to after a call, in GiB (``--cache-limit``).
DEFAULT_LIMIT_GIB = 2.0
# Changes whenever the key's recipe does, so that a new recipe never reads an old name's meaning.
KEY_FORMAT = "metricbert-cache-key-1"
RECOGNISED = (is_embedding_cache, is_tfidf_cache, is_lists_cache)


def cache_folder() -> Path:
    """``$METRICBERT_CACHE``, else ``$XDG_CACHE_HOME/metricbert`` (an absolute path, as the XDG
    specification asks; a relative one is ignored), else ``~/.cache/metricbert``."""
    named = os.environ.get(CACHE_VARIABLE)
    if named:
        return Path(named).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache") / "metricbert"


def folder_cache_path(
    folder: Path, model_folder: Path, catalog: Catalog, *, mode: str, max_length: int, precision: str
) -> Path:
    """The embedding cache in ``folder`` of the model loaded from ``model_folder`` on ``catalog``:
    named after the model's folder and a digest of its files (``file_stamps.model_folder_files``), the
    catalog's ids and texts, the scoring ``mode``, ``max_length`` and the ``precision`` the call
    encodes in, so that another model, catalog or setting gets a file of its own. The precision is
    part of the key, unlike an embedding cache's fingerprint: a call that asks for bf16 is asking
    for other vectors, while a cache file named by the user serves whatever precision wrote it."""
    digest = hashlib.blake2b(digest_size=16)
    settings = [KEY_FORMAT, model_folder_files(model_folder), mode, max_length, precision]
    digest.update(json.dumps(settings).encode("utf-8"))
    add_catalog(digest, catalog)
    model = re.sub(r"[^A-Za-z0-9_.-]+", "-", model_folder.name).strip(".-")[:40] or "model"
    return folder / f"{model}-{digest.hexdigest()}.npz"


def kept_caches(folder: Path) -> list[Path]:
    """The caches this library wrote in ``folder``: ``.npz`` files (no link, no temporary file of a
    write in flight, whose name starts with a dot) that one of its cache readers recognises."""
    if not folder.is_dir():
        return []
    return [
        entry
        for entry in sorted(folder.iterdir())
        if entry.suffix == ".npz"
        and not entry.name.startswith(".")
        and entry.is_file()
        and not entry.is_symlink()
        and any(is_cache(entry) for is_cache in RECOGNISED)
    ]


def used_and_trimmed(embedding_cache: Path, limit_bytes: int) -> list[Path]:
    """Marks the caches a call used (``embedding_cache`` and those beside it that exist) as used
    now, then removes the other caches of their folder (``kept_caches``) least recently used first
    until the folder's caches hold at most ``limit_bytes``; returns what it removed.

    A cache's last use is its modification time, set at each use: access times are not kept by
    every file system (``noatime``), and any reader moves them, this trimming's own look inside
    each file included. The call's own caches are never removed, even when they alone exceed the
    limit (a warning says so): the next call on the same catalog reads them back."""
    used = [path for path in (embedding_cache, *beside(embedding_cache)) if path.is_file()]
    for path in used:
        try:
            os.utime(path)
        except FileNotFoundError:  # trimmed by another command meanwhile
            pass
    keep = {path.resolve() for path in used}
    caches = []
    for path in kept_caches(embedding_cache.parent):
        try:
            stat = path.stat()
        except FileNotFoundError:
            continue
        caches.append((stat.st_mtime_ns, stat.st_size, path))
    total = sum(size for _, size, _ in caches)
    removed = []
    for _, size, path in sorted(caches):
        if total <= limit_bytes:
            break
        if path.resolve() not in keep:
            path.unlink(missing_ok=True)
            total -= size
            removed.append(path)
    if removed:
        logger.info(
            "Removed %d cache file(s) of %s, the least recently used, to keep its caches within %.2f GiB.",
            len(removed), embedding_cache.parent, limit_bytes / 2**30,
        )  # fmt: skip
    if total > limit_bytes:
        logger.warning(
            "The caches of this call hold %.2f GiB, more than the cache folder's limit of %.2f GiB; "
            "they are kept, and the next call on this catalog reads them back.",
            total / 2**30, limit_bytes / 2**30,
        )  # fmt: skip
    return removed


def beside(embedding_cache: Path) -> tuple[Path, Path]:
    """The caches kept beside an embedding cache: the TF-IDF matrices and the shared-neighbour lists."""
    return tfidf_cache_beside(embedding_cache), lists_cache_beside(embedding_cache)
