"""What a file or a model's folder looks like from outside: sizes and modification times.

Hashing a file's contents proves it unchanged, and costs a read of every byte: gigabytes for a
model's weights, hundreds of megabytes for a catalog of a million items, every call. A stamp of
size and modification time (in nanoseconds) costs a ``stat``: what names a cache file of the model
(``cache_folder``) and what tells a kept index that its catalog and model are still the ones it was
built from (``item_index``), where half a second is the whole budget of an answer. A rewrite leaves
a new modification time; a copy or a ``touch`` changes the stamp of an unchanged file, which costs
a rebuild, never a wrong answer.
"""

from __future__ import annotations

import os
from pathlib import Path


def file_stamp(path: str | Path) -> list[int]:
    """The size and modification time (ns) of the file ``path`` (links followed)."""
    stat = os.stat(path)
    return [stat.st_size, stat.st_mtime_ns]


def model_folder_files(folder: Path) -> list[tuple[str, int, int]]:
    """The name, size and modification time (ns) of each file directly in the model ``folder``.

    Not a hash of the contents: that would read every weight file on every call, gigabytes for a
    large model, to name a file whose own fingerprint hashes the loaded weights anyway. A key that
    changes while the model does not (a copied folder, a touched file) costs one encoding; one that
    stays while the model changes (a file rewritten to the same size under the same timestamp) is
    caught by that fingerprint. Subfolders (a run's checkpoints) are left out: the model loads from
    the folder's own files."""
    files = []
    for entry in folder.iterdir():
        if entry.is_file():
            stat = entry.stat()
            files.append((entry.name, stat.st_size, stat.st_mtime_ns))
    return sorted(files)
