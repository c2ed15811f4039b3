"""Which files a command may write: never a file it reads, never one it did not create unless told.

A user who names the wrong path (``--output`` the catalog, ``--output_dir`` a folder of their own)
must lose nothing. Every command and recipe that writes asks here first, before anything loads:

- a file the command reads (its catalog, its annotations) is never written over;
- any other existing file is replaced only when the user says so (``--overwrite`` on the
  ``metricbert`` commands, ``overwrite_output_dir`` in a recipe), and the refusal names the file;
- a recipe's output folder must be empty, or hold an earlier run (this library's run lock,
  ``RUN_LOCK_FILE``, or a copied ``checkpoint-N``) that the recipe resumes
  (``resume_from_checkpoint``) or, with ``overwrite_output_dir``, replaces: what that run wrote
  (its manifest, ``RUN_MANIFEST_FILE``) is removed first, so no checkpoint or plot of it is left
  beside the new model, and nothing else is: not a file the new run reads (its catalog, its
  annotations, its starting model), not a file a user put there. Files of a folder no run of
  this library wrote are replaced one by one by the files the run writes, and only with
  ``overwrite_output_dir``; the others stay.

The embedding cache has its own rule (``evaluation.encoding``): it replaces only embedding caches.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from metricbert_trainer.errors import UsageError

logger = logging.getLogger(__name__)

# The run lock every training run holds in its output folder (``scripts.output_lock``): also the
# mark of a folder a run of this library wrote. Leading underscore: transformers leaves "_*" out
# of what it uploads to the Hub.
RUN_LOCK_FILE = "_run.lock"
# Which top-level entries of a run's output folder the run wrote (JSON), kept beside the lock: from
# the run's start the entries that were there before it ("not_written"), at its end the entries it
# wrote ("written"). A later run told to overwrite the folder removes what the run wrote, or, after
# a run killed midway, every entry that was not there before it; nothing else.
RUN_MANIFEST_FILE = "_run.files.json"
RUN_FILES = (RUN_LOCK_FILE, RUN_MANIFEST_FILE)
# How many of a folder's entries a message lists before it counts the rest.
LISTED_ENTRIES = 5


def check_new_files(
    paths: Iterable[str | Path],
    *,
    option: str,
    reads: Iterable[str | Path | None] = (),
    overwrite: bool = False,
) -> None:
    """Raises ``UsageError`` naming the first of ``paths`` that is one of the files the command
    ``reads``, or that exists while ``overwrite`` is off; ``option`` is how the user named it. A
    folder among ``reads`` (a model the command loads) reads every file inside it."""
    read = {identity for path in reads if path for identity in _read_identities(Path(path))}
    for path in map(Path, paths):
        if _identity(path) in read:
            raise UsageError(f"{option} {path} is a file this command reads; name another file")
        if path.is_dir():
            raise UsageError(f"{option} {path} is a folder; name a file")
        if path.exists() and not overwrite:
            raise UsageError(f"{option} {path} exists; pass --overwrite to replace it, or name another file")
        problem = unwritable_problem(path.parent, option=option, named=path)
        if problem:
            raise UsageError(problem)


def write_whole(path: str | Path, write: Callable[[Path], None], *, suffix: str = "") -> Path:
    """Writes ``path`` through ``write(temporary)``: into a file of a name of its own beside it,
    renamed onto ``path`` when complete. An interrupted or failed write (Ctrl-C, a full disk)
    leaves neither a half-written ``path`` nor the temporary file, and two commands writing the same
    output never write into one file (the last rename wins, whole). ``suffix`` ends the temporary
    file's name, for writers that choose a format by it (``.npz``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=f".partial{suffix}")
    os.close(descriptor)
    temporary = Path(name)
    try:
        write(temporary)
        temporary.replace(path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path


def write_text_whole(path: str | Path, text: str) -> Path:
    """``write_whole`` of a UTF-8 text."""
    return write_whole(path, lambda temporary: temporary.write_text(text, encoding="utf-8"))


def check_new_file(
    path: str | Path, *, option: str, reads: Iterable[str | Path | None] = (), overwrite: bool = False
) -> Path:
    """``check_new_files`` for one path, returned as a ``Path``."""
    check_new_files([path], option=option, reads=reads, overwrite=overwrite)
    return Path(path)


def check_empty_folder(path: str | Path, *, option: str, overwrite: bool = False) -> Path:
    """Raises ``UsageError`` when ``path`` is a file, or a folder with entries while ``overwrite``
    is off: for commands that write a whole folder of files they do not list in advance."""
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{option} {path} is a file; name a folder")
    problem = unwritable_problem(folder, option=option)
    if problem:
        raise UsageError(problem)
    entries = earlier_entries(folder)
    if entries and not overwrite:
        raise UsageError(
            f"{option} {path} already holds files ({listed(entries)}); pass --overwrite to write over them, or "
            "name an empty folder"
        )
    return folder


def unwritable_problem(folder: str | Path, *, option: str, named: str | Path | None = None) -> str | None:
    """Why nothing can be written in ``folder`` (created where missing): found before the minutes of
    work whose result would be lost at the write. ``named`` is the path the user gave, when it is
    a file in ``folder``."""
    named = named if named is not None else folder
    existing = Path(folder).expanduser().absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return f"{option} {named} cannot be created: {existing} is a file"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{option} {named} is not writable: no write permission on {existing}"
    return None


def output_folder_content_problems(output_dir: str | Path, *, overwrite: bool, resuming: bool) -> list[str]:
    """Why a run may not write into ``output_dir`` as it stands (empty when it may)."""
    folder = Path(output_dir).expanduser()
    entries = earlier_entries(folder)
    if not entries:
        return []
    earlier_run = is_earlier_run(folder)
    if overwrite or (resuming and (earlier_run or holds_checkpoints(folder))):
        return []
    what = "an earlier run's files" if earlier_run else "files no run of this library wrote"
    continuing = ", resume_from_checkpoint last to continue that run" if earlier_run else ""
    return [
        f"output_dir {output_dir} already holds {what} ({listed(entries)}): pass --overwrite_output_dir true to "
        f"replace them{continuing}, or name an empty folder"
    ]


def clear_earlier_run(
    output_dir: str | Path, *, earlier_run: bool, reads: Iterable[str | Path | None] = ()
) -> None:
    """Removes what an earlier run of this library wrote in ``output_dir`` (every entry its
    manifest does not name as not its own; every entry for a run older than manifests), so a run
    told to overwrite it leaves no stale checkpoint or plot. An entry that is, or holds, a file of
    ``reads`` (what the new run reads) is kept. A folder that no run of this library wrote
    (``earlier_run``: ``is_earlier_run`` before this run took its lock) is left as it is, its
    same-named files replaced as the run writes them."""
    folder = Path(output_dir)
    entries = earlier_entries(folder)
    if not entries:
        return
    if not earlier_run:
        logger.warning(
            "output_dir %s holds files no run of this library wrote (%s); overwrite_output_dir replaces those "
            "the run writes and leaves the others.",
            folder,
            listed(entries),
        )
        return
    manifest = read_manifest(folder)
    read = {identity for path in reads if path for identity in _read_identities(Path(path))}
    removed, kept_inputs = [], []
    for entry in entries:
        if manifest is not None and not manifest.wrote(entry.name):
            continue
        if any(_identity(entry) == path or _identity(entry) in path.parents for path in read):
            kept_inputs.append(entry)
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
        removed.append(entry)
    (folder / RUN_MANIFEST_FILE).unlink(missing_ok=True)
    logger.info("overwrite_output_dir: removed the earlier run's %d entries from %s.", len(removed), folder)
    if kept_inputs:
        logger.info("overwrite_output_dir: kept %s, which this run reads.", listed(kept_inputs))
    others = [entry for entry in entries if entry not in removed and entry not in kept_inputs]
    if others:
        logger.info("overwrite_output_dir: kept %s, which the earlier run did not write.", listed(others))


@dataclass(frozen=True)
class RunManifest:
    """What a run recorded of its folder: the entries there before it, and the entries it wrote
    (``None`` until it ends)."""

    not_written: frozenset[str]
    written: frozenset[str] | None

    def wrote(self, name: str) -> bool:
        """Whether the run wrote the entry ``name``: as it recorded at its end, or, for a run that
        never reached its end, every entry that was not there before it."""
        return name in self.written if self.written is not None else name not in self.not_written


def read_manifest(folder: Path) -> RunManifest | None:
    """``folder``'s manifest, or ``None`` without one (a run of this library older than manifests)."""
    try:
        content = json.loads((folder / RUN_MANIFEST_FILE).read_text(encoding="utf-8"))
        written = content["written"]
        return RunManifest(frozenset(content["not_written"]), None if written is None else frozenset(written))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def record_run_start(folder: Path) -> None:
    """The manifest at a run's start: the entries already in ``folder`` are not the run's, and the
    entries an earlier part of the same run wrote (a resumed run) stay its own."""
    earlier = read_manifest(folder)
    present = {entry.name for entry in earlier_entries(folder)}
    written = set() if earlier is None else {name for name in present if earlier.wrote(name)}
    _write_manifest(folder, RunManifest(frozenset(present - written), None))


def record_run_end(folder: Path, *, started_ns: int) -> None:
    """The manifest at a run's end: every entry that was not there before it, or that it changed
    (modified since ``started_ns``: a user's README.md replaced by the card), is the run's."""
    manifest = read_manifest(folder) or RunManifest(frozenset(), None)
    written = {
        entry.name
        for entry in earlier_entries(folder)
        if entry.name not in manifest.not_written or entry.lstat().st_mtime_ns >= started_ns
    }
    _write_manifest(folder, RunManifest(manifest.not_written - written, frozenset(written)))


def _write_manifest(folder: Path, manifest: RunManifest) -> None:
    content = {
        "not_written": sorted(manifest.not_written),
        "written": None if manifest.written is None else sorted(manifest.written),
    }
    (folder / RUN_MANIFEST_FILE).write_text(json.dumps(content, indent=1) + "\n", encoding="utf-8")


def is_earlier_run(folder: Path) -> bool:
    """Whether a run of this library wrote ``folder`` (it holds the run lock file)."""
    return (folder / RUN_LOCK_FILE).is_file()


def holds_checkpoints(folder: Path) -> bool:
    """Whether ``folder`` holds Trainer checkpoints (``checkpoint-N``): a training run's folder,
    this library's or one a user copied a checkpoint into to resume it there."""
    return any(entry.is_dir() for entry in folder.glob("checkpoint-*"))


def earlier_entries(folder: Path) -> list[Path]:
    """The entries of ``folder`` besides the run lock and manifest, sorted; none when it does not exist."""
    if not folder.is_dir():
        return []
    return sorted(entry for entry in folder.iterdir() if entry.name not in RUN_FILES)


def listed(entries: list[Path]) -> str:
    names = ", ".join(entry.name for entry in entries[:LISTED_ENTRIES])
    more = len(entries) - LISTED_ENTRIES
    return names + (f" and {more} more" if more > 0 else "")


def _read_identities(path: Path) -> list[Path]:
    """The files a command reading ``path`` reads: the file, or every file of the folder."""
    if path.is_dir():
        return [_identity(path), *(_identity(entry) for entry in path.rglob("*") if entry.is_file())]
    return [_identity(path)]


def _identity(path: Path) -> Path:
    """The same value for every spelling of one file (relative, ``~``, ``..``, symbolic links)."""
    return path.expanduser().resolve()
