"""The embedding cache: a catalog's vectors kept in an ``.npz`` between calls, and found again.

``encoding.encode_views`` reads a cache whose fingerprint (``embedding_fingerprint``: the model's
weights and config, the tokenizer, ``max_length``, every text) matches, and otherwise encodes and
writes one. Each text's 128-bit digest is kept beside the vectors under a fingerprint of the model
and settings alone, so that a catalog that changed reads back the texts it still holds
(``EarlierVectors``) and encodes only the others. The TF-IDF and shared-neighbour caches beside an
embedding cache share its reading and writing (``read_fingerprinted_npz``, ``write_npz_whole``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import IO

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from metricbert_trainer.data.digests import add_text
from metricbert_trainer.data.output_files import unwritable_problem, write_whole
from metricbert_trainer.errors import UsageError

logger = logging.getLogger(__name__)

# Bump when the embedding recipe (pooling, layer, tokenisation) changes, so old caches are ignored.
CACHE_FORMAT = "metricbert-embeddings-v1"


def text_digest(text: str) -> bytes:
    """What a cache files a text's vector under: 128 bits of its UTF-8 digest."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def text_digests(texts: Sequence[str]) -> list[bytes]:
    """``text_digest`` of each of ``texts``."""
    return [text_digest(text) for text in texts]


def digest_matrix(digests: Sequence[bytes]) -> np.ndarray:
    """``text_digest``s as the rows of a ``[len, 16]`` uint8 array, as caches store them: a bytes
    array ("S16") would drop a digest's trailing zero bytes."""
    return np.frombuffer(b"".join(digests), dtype=np.uint8).reshape(len(digests), 16)


# Rows of an earlier cache's view read at a time by an update: 16,384 vectors of 384 floats are
# 24 MiB, where reading a view whole held a second copy of the catalog's vectors (1.5 GiB a view at
# a million items of MiniLM) beside the matrices being filled.
BLOCK_ROWS = 16_384

# What reading a damaged or foreign archive raises (a truncated member, a CRC that fails at its end).
UNREADABLE = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile)


def texts_at(views: dict[str, list[str]], positions: Iterable[int]) -> list[str]:
    """The texts at ``positions`` among the texts of ``views`` one after another."""
    texts = list(itertools.chain.from_iterable(views.values()))
    return [texts[position] for position in positions]


class EarlierVectors:
    """The vectors an earlier embedding cache holds for the same model and settings, by text
    digest: what the encoding of a changed catalog reads back instead of encoding again. Only the
    digests are held; the vectors are read from the file a block of rows at a time, straight into
    the matrices they fill (``updated``)."""

    def __init__(
        self, path: Path, rows: dict[bytes, tuple[str, int]], widths: dict[str, int], precision: str
    ) -> None:
        self.path, self.rows, self.widths, self.precision = path, rows, widths, precision

    @classmethod
    def read(cls, path: Path, model_fingerprint: str) -> EarlierVectors:
        """The digests of the cache at ``path`` when it was written for ``model_fingerprint`` and
        holds them; none otherwise (no file, another model or ``max_length``, a cache written
        before the digests were kept)."""
        none = cls(path, {}, {}, "")
        if not path.is_file():
            return none
        try:
            with np.load(path, allow_pickle=False) as stored:
                if (
                    "model_fingerprint" not in stored.files
                    or str(stored["model_fingerprint"]) != model_fingerprint
                ):
                    return none
                names = [name.removeprefix("view:") for name in stored.files if name.startswith("view:")]
                digests = {name: stored[f"digest:{name}"] for name in names}
                precision = str(stored["precision"])
                headers = {name: _npy_header(stored.zip, f"view:{name}.npy") for name in names}
        except UNREADABLE:
            return none
        if any(fortran_order for _, fortran_order, _ in headers.values()):
            return none  # not written by this library, whose matrices are C-ordered
        rows: dict[bytes, tuple[str, int]] = {}
        for name in names:
            for row, digest in enumerate(digests[name]):
                rows.setdefault(digest.tobytes(), (name, row))
        return cls(path, rows, {name: shape[1] for name, (shape, _, _) in headers.items()}, precision)

    def updated(
        self,
        views: dict[str, list[str]],
        digests: dict[str, list[bytes]],
        missing: dict[bytes, int],
        encode: Callable[[list[str]], np.ndarray],
        precision: str,
        *,
        block_rows: int = BLOCK_ROWS,
    ) -> tuple[dict[str, np.ndarray], str]:
        """The matrices of ``views`` (whose texts' ``digests`` are given): the vectors of the texts
        this cache holds read back (``block_rows`` of a stored view at a time), the others
        (``missing``, from ``self.missing``) encoded by ``encode`` (once each, at ``precision``);
        and the precisions the result was encoded in. Raises one of ``UNREADABLE`` when the cache's
        vectors cannot be read back whole."""
        encoded = encode(texts_at(views, missing.values()))
        encoded_rows = {digest: row for row, digest in enumerate(missing)}
        total = sum(len(rows) for rows in digests.values())
        read_back = total - sum(digest in encoded_rows for rows in digests.values() for digest in rows)
        logger.info(
            "Updating the embeddings of %s: %d of %d texts read back, %d distinct texts encoded.",
            self.path,
            read_back,
            total,
            len(missing),
        )
        precisions = set(self.precision.split(", ")) if read_back else set()
        precisions |= {precision} if missing else set()
        sources = ["", *self.widths]  # "" is this call's encoding, the others this cache's views
        source_of = {name: index for index, name in enumerate(sources)}
        places = {name: self._places(digests[name], encoded_rows, source_of) for name in views}
        width = next(iter(self.widths.values()))
        matrices = {name: np.empty((len(digests[name]), width), dtype=np.float32) for name in views}
        for name, (source, row) in places.items():
            chosen = np.flatnonzero(source == 0)
            matrices[name][chosen] = encoded[row[chosen]]
        for index, stored in enumerate(sources[1:], start=1):
            # Each matrix's rows from this view, in the view's order, to be filled block by block.
            wanted = {}
            for name, (source, row) in places.items():
                chosen = np.flatnonzero(source == index)
                order = np.argsort(row[chosen], kind="stable")
                wanted[name] = (chosen[order], row[chosen][order])
            if not any(len(rows) for _, rows in wanted.values()):
                continue  # a view whose texts all came first in another, or left the catalog
            for first, block in self._blocks(stored, block_rows):
                for name, (destinations, rows) in wanted.items():
                    start, stop = np.searchsorted(rows, [first, first + len(block)])
                    # A text repeated across the catalog is read from one row, which fills many:
                    # copied block_rows at a time, as many repeats never make a copy of their own.
                    for part in range(start, stop, block_rows):
                        end = min(part + block_rows, stop)
                        matrices[name][destinations[part:end]] = block[rows[part:end] - first]
        return matrices, ", ".join(sorted(precisions))

    def missing(self, views: dict[str, list[str]], digests: dict[str, list[bytes]]) -> dict[bytes, int]:
        """The texts of ``views`` (whose ``digests`` are given) that this cache lacks, each once,
        by digest, in the order ``updated`` encodes them: where each first comes among the views'
        texts one after another (``texts_at``), a few numbers that process 0 of a shared encoding
        can send the others, which then need neither the digests nor the cache."""
        rows = itertools.chain.from_iterable(digests[name] for name in views)
        missing: dict[bytes, int] = {}
        for position, digest in enumerate(rows):
            if digest not in self.rows:
                missing.setdefault(digest, position)
        return missing

    def _places(
        self, digests: list[bytes], encoded_rows: dict[bytes, int], source_of: dict[str, int]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Where each of ``digests``' vectors comes from: the index of its source in ``source_of``
        (0, this call's encoding, at row ``encoded_rows[digest]``; or a view of this cache) and its
        row there."""
        places = np.array(
            [
                (0, encoded_rows[digest])
                if digest in encoded_rows
                else (source_of[self.rows[digest][0]], self.rows[digest][1])
                for digest in digests
            ],
            dtype=np.int64,
        ).reshape(-1, 2)
        return places[:, 0], places[:, 1]

    def _blocks(self, name: str, block_rows: int) -> Iterator[tuple[int, np.ndarray]]:
        """The rows of this cache's view ``name``, ``block_rows`` at a time, each with the index of
        its first row: read from the archive as they are needed, never the view whole."""
        with zipfile.ZipFile(self.path) as archive, archive.open(f"view:{name}.npy") as member:
            shape, _, dtype = _npy_header_of(member)
            for first in range(0, shape[0], block_rows):
                count = min(block_rows, shape[0] - first)
                data = member.read(count * shape[1] * dtype.itemsize)
                yield first, np.frombuffer(data, dtype=dtype).reshape(count, shape[1])


def _npy_header(archive: zipfile.ZipFile, member: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    """The shape, order and dtype of the .npy file ``member`` of ``archive``."""
    with archive.open(member) as stream:
        return _npy_header_of(stream)


def _npy_header_of(stream: IO[bytes]) -> tuple[tuple[int, ...], bool, np.dtype]:
    """The shape, order and dtype of the .npy ``stream``, which is left at its first byte of data."""
    version = np.lib.format.read_magic(stream)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(stream)
    return np.lib.format.read_array_header_2_0(stream)


def embedding_fingerprint(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    views: dict[str, list[str]],
    *,
    max_length: int,
) -> str:
    """A hex digest that changes whenever the embeddings of ``views`` could change."""
    return embedding_fingerprints(model, tokenizer, views, max_length=max_length)[0]


def embedding_fingerprints(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    views: dict[str, list[str]],
    *,
    max_length: int,
) -> tuple[str, str]:
    """``embedding_fingerprint`` of ``views``, and of no views (the model and settings alone, what
    a cache's texts are filed under for a later catalog's update), the model hashed once for both."""
    digest = hashlib.blake2b(digest_size=20)

    add = partial(add_text, digest)

    add(CACHE_FORMAT)
    add(type(model.base_model).__name__)
    # Paths and versions do not change the output, so a moved or re-saved model keeps its cache.
    config = {
        key: value
        for key, value in model.config.to_dict().items()
        if not key.startswith("_") and key != "transformers_version"
    }
    add(json.dumps(config, sort_keys=True, default=str))
    for name, tensor in model.base_model.state_dict().items():
        # The pooler is unused by mean pooling, and AutoModel initialises it at random when loading
        # an MLM checkpoint, which would otherwise change the fingerprint on every load.
        if name.startswith("pooler."):
            continue
        add(name)
        # Hashed in place: a copy as bytes held the largest tensor twice (the word embeddings).
        digest.update(tensor.detach().cpu().reshape(-1).contiguous().view(torch.uint8).numpy())
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        # Padding and truncation hold the settings of the last call, not properties of the tokenizer.
        settings = {
            key: value
            for key, value in json.loads(backend.to_str()).items()
            if key not in ("padding", "truncation")
        }
        add(json.dumps(settings, sort_keys=True))
    else:
        add(json.dumps(tokenizer.get_vocab(), sort_keys=True))
    add(f"{tokenizer.truncation_side} {max_length}")
    model_alone = digest.hexdigest()
    for name, texts in views.items():
        add(name)
        add(str(len(texts)))
        for text in texts:
            add(text)
    return digest.hexdigest(), model_alone


def check_cache_path(path: str | Path) -> Path:
    """``path`` as a ``Path``, after a ``UsageError`` when it names a folder or a file that is not
    an embedding cache: a mistyped ``--cache`` (the catalog, say) must not turn a user's file into
    an npz archive."""
    return check_cache_file(
        path, kind="embedding cache", is_cache=is_embedding_cache, instead="name another file for the cache"
    )


def check_cache_file(path: str | Path, *, kind: str, is_cache: Callable[[Path], bool], instead: str) -> Path:
    """``path`` as a ``Path`` a cache of ``kind`` may be written to, after a ``UsageError`` when it
    is a folder, a file ``is_cache`` does not recognise (``instead`` says what to do), or
    unwritable: a cache replaces only what this library wrote as such a cache."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"the {kind} {path} is a folder; name an .npz file")
    if path.exists() and not is_cache(path):
        article = "an" if kind[0] in "aeiou" else "a"
        raise UsageError(
            f"{path} is not {article} {kind} (an .npz this library wrote), so it is not replaced; {instead}"
        )
    problem = unwritable_problem(path.parent, option=f"the {kind}", named=path)
    if problem:
        raise UsageError(problem)
    return path


def is_embedding_cache(path: Path) -> bool:
    """Whether ``path`` is an .npz archive laid out as ``write_embedding_cache`` writes one."""
    names = npz_names(path)
    return names is not None and (
        "fingerprint" in names
        and all(
            name in ("fingerprint", "model_fingerprint", "precision") or name.startswith(("view:", "digest:"))
            for name in names
        )
    )


def npz_names(path: Path) -> list[str] | None:
    """The array names of the .npz archive at ``path``; ``None`` when it is not one (how each cache
    tells its own files from a user's)."""
    try:
        with np.load(path, allow_pickle=False) as stored:
            return list(stored.files)
    except UNREADABLE:  # a damaged zip archive (BadZipFile) is not a cache either
        return None


def read_fingerprinted_npz(
    path: Path,
    fingerprint: str,
    names: Sequence[str],
    *,
    holds: str,
    cache: str,
    again: str,
    log: logging.Logger = logger,
    optional: Sequence[str] = (),
    load: bool = True,
) -> dict[str, np.ndarray] | None:
    """The arrays ``names`` of a cache at ``path`` that ``write_npz_whole`` wrote with a
    ``fingerprint`` array, when it was written for ``fingerprint``, and those of ``optional`` it
    holds (a cache written before they were kept lacks them). ``None`` when there is no file,
    when it was written for something else (said at info: ``path`` holds ``holds``; ``again``) and
    when it cannot be read or lacks an array of ``names`` (a warning naming the ``cache``): the
    caller then computes what it keeps again. One reader for the embedding, TF-IDF and lists
    caches, each saying so through its own module's ``log``.

    ``load=False`` is for a caller that wants the cache to hold ``names``, not their values
    (``metricbert encode``, whose cache may already be there): each is read through to check it,
    none kept, and only the ``optional`` ones are returned."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as stored:
            if "fingerprint" not in stored.files or str(stored["fingerprint"]) != fingerprint:
                log.info("%s holds %s; %s.", path, holds, again)
                return None
            held = [name for name in optional if name in stored.files]
            if load:
                return {name: stored[name] for name in [*names, *held]}
            for name in names:
                _read_through(stored.zip, f"{name}.npy")
            return {name: stored[name] for name in held}
    except UNREADABLE as error:  # a damaged member fails its CRC (BadZipFile) once read to its end
        log.warning("Cannot read the %s %s (%s); %s.", cache, path, error, again)
        return None


def _read_through(archive: zipfile.ZipFile, member: str) -> None:
    """Reads ``member`` of ``archive`` to its end, 1 MiB at a time, keeping nothing: the archive
    checks its CRC there, so a damaged member raises (``BadZipFile``); a missing one raises
    ``KeyError``."""
    with archive.open(member) as stream:
        while stream.read(1 << 20):
            pass


def write_embedding_cache(
    path: Path,
    fingerprint: str,
    model_fingerprint: str,
    embeddings: dict[str, np.ndarray],
    digests: dict[str, list[bytes]],
    precision: str,
) -> None:
    """The views' matrices under the catalog's ``fingerprint``, and each text's digest under the
    ``model_fingerprint`` (model, tokenizer and ``max_length`` alone), for a later catalog's update."""
    write_npz_whole(
        path,
        fingerprint=np.array(fingerprint),
        model_fingerprint=np.array(model_fingerprint),
        precision=np.array(precision),
        **{f"view:{name}": matrix for name, matrix in embeddings.items()},
        **{f"digest:{name}": digest_matrix(rows) for name, rows in digests.items()},
    )
    logger.info("Wrote embeddings to %s.", path)


def write_npz_whole(path: Path, **arrays: np.ndarray) -> None:
    """``np.savez(path, **arrays)``, written beside and renamed, so an interrupted run never leaves
    a truncated archive behind, and a full disk no half-written one."""
    write_whole(path, lambda temporary: np.savez(temporary, **arrays), suffix=".npz")
