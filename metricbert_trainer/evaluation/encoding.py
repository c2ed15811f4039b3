"""Embedding catalog texts with a MetricBERT (or any Hugging Face) encoder for ranking.

An item's vector for a view is the attention-masked mean of the encoder's last hidden layer,
the same pooling the model is trained with. Texts are batched in order of token length so a
batch pads to a similar length, which roughly halves the work on catalogs whose descriptions
vary a lot; the vectors come back in the original order. Encoding a whole catalog is the costly
part of an evaluation, so ``encode_catalog`` can keep the result in an ``.npz`` keyed by a
fingerprint of everything that determines it and reuse it while that stays the same.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from metricbert_trainer.base.attention import varying_shape_attention
from metricbert_trainer.base.distributed import world_size
from metricbert_trainer.base.pooling import mean_pool
from metricbert_trainer.data.catalog import Catalog
from metricbert_trainer.data.lengths import catalog_token_ids
from metricbert_trainer.data.output_files import unwritable_problem
from metricbert_trainer.errors import UsageError
from metricbert_trainer.evaluation.neighbours import METRIC_INF, catalog_views

logger = logging.getLogger(__name__)

# Bump when the embedding recipe (pooling, layer, tokenisation) changes, so old caches are ignored.
CACHE_FORMAT = "metricbert-embeddings-v1"


def encode_texts(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    *,
    batch_size: int = 64,
    max_length: int = 128,
    show_progress: bool = False,
    across_processes: bool = False,
    lengths: np.ndarray | None = None,
    dtype: np.dtype | type = np.float32,
    precision: str = "auto",
) -> np.ndarray:
    """Mean-pooled last-layer embeddings of ``texts`` as a ``[N, hidden]`` array of ``dtype``
    (float32 by default; float16 holds the guide's cache in half the memory), in order.

    Runs on the model's device under ``torch.inference_mode`` and the autocast of ``precision``
    (``inference_autocast``: by default bf16, or fp16 where bf16 is not supported, on CUDA only),
    through ``model.base_model`` so a checkpoint saved with its
    MLM head works as well as a bare encoder. The model's train/eval mode is restored afterwards,
    so the trainer can call this between steps.

    ``across_processes``: in a distributed run, every process must call this with the same
    texts; each encodes an equal share (every P-th text by length, so shares cost the same and,
    under ZeRO-3 or FSDP, every process runs the same number of forwards) and all receive the
    whole result.

    ``lengths``: each text's token count truncated at ``max_length``, where the caller already
    holds them (``TokenRows``); counted here otherwise. They order the texts longest first.
    """
    texts = list(texts)
    if not texts:
        return np.zeros((0, model.config.hidden_size), dtype=np.float32)
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1; got {batch_size}.")
    order = (
        longest_first(tokenizer, texts, max_length)
        if lengths is None
        else np.argsort(-np.asarray(lengths), kind="stable")
    )
    processes = world_size() if across_processes else 1
    embeddings = np.empty((len(texts), model.config.hidden_size), dtype=dtype)
    if processes == 1:
        _encode_rows(
            model,
            tokenizer,
            texts,
            order,
            embeddings,
            order,
            batch_size,
            max_length,
            show_progress,
            precision,
        )
        return embeddings
    shares = [order[rank::processes] for rank in range(processes)]
    share_size = len(shares[0])
    own = shares[torch.distributed.get_rank()]
    # Shares differ by at most one text; repeating one keeps every process's batch count equal.
    padded = np.concatenate([own, np.repeat(order[:1], share_size - len(own))])
    local = np.empty((len(padded), model.config.hidden_size), dtype=np.float32)
    _encode_rows(
        model,
        tokenizer,
        texts,
        padded,
        local,
        np.arange(len(padded)),
        batch_size,
        max_length,
        show_progress,
        precision,
    )
    device = next(model.parameters()).device
    # Gathered GATHER_ROWS of each share at a time: the whole gather would hold every process's
    # vectors on each device at once (N x hidden floats: 31 GB for MiniLM's 20 million texts of ten
    # million items, 82 GB for BERT-Large's), beside the model.
    for start in range(0, share_size, GATHER_ROWS):
        part = torch.from_numpy(local[start : start + GATHER_ROWS]).to(device)
        pieces = [torch.empty_like(part) for _ in range(processes)]
        torch.distributed.all_gather(pieces, part)
        for rows, piece in zip(shares, pieces, strict=True):
            kept = rows[start : start + GATHER_ROWS]  # a shorter share's padding row is left out
            embeddings[kept] = piece[: len(kept)].cpu().numpy()
    return embeddings


# Rows of each process's share gathered at a time by a shared encoding (``encode_texts``).
GATHER_ROWS = 65536


def longest_first(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], max_length: int) -> np.ndarray:
    """The positions of ``texts`` from the longest (in tokens, truncated) to the shortest, ties in
    order: a batch that does not fit in memory fails at once, not at the end, and each batch pads
    little. Tokenized a chunk at a time (``lengths.catalog_token_ids``): the fast tokenizer's encodings of
    every text at once took 6.5 GiB for 500,000 descriptions, which at a million items would not
    fit in 24 GiB (``benchmarks/million_items.py lengths``)."""
    lengths = np.fromiter(
        (len(ids) for ids in catalog_token_ids(tokenizer, texts, max_length)),
        dtype=np.int64,
        count=len(texts),
    )
    return np.argsort(-lengths, kind="stable")


def _encode_rows(
    model, tokenizer, texts, rows, out, out_rows, batch_size, max_length, show_progress, precision
) -> None:
    """Encodes ``texts[rows]`` in batches of consecutive rows, the vector of ``texts[rows[i]]``
    written to ``out[out_rows[i]]`` (cast to ``out``'s dtype)."""
    with inference_session(model, precision) as device:
        for start in tqdm(
            range(0, len(rows), batch_size), desc="Encoding", unit="batch", disable=not show_progress
        ):
            batch = tokenizer(
                [texts[i] for i in rows[start : start + batch_size]],
                padding=True,
                truncation=True,
                max_length=max_length,
                return_tensors="pt",
            ).to(device)
            hidden = model.base_model(**batch).last_hidden_state
            out[out_rows[start : start + batch_size]] = (
                mean_pool(hidden.float(), batch["attention_mask"]).cpu().numpy()
            )


@contextlib.contextmanager
def inference_session(model: PreTrainedModel, precision: str = "auto") -> Iterator[torch.device]:
    """Every inference pass of the package runs in this: the model in eval mode (dropout off),
    ``torch.inference_mode`` and ``inference_autocast``; it yields the model's device and gives the
    model its train/eval mode back afterwards, so a trainer can evaluate between steps."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with (
            torch.inference_mode(),
            inference_autocast(device, precision),
            varying_shape_attention(device),
            without_training_autocast(model),
        ):
            yield device
    finally:
        model.train(was_training)


@contextlib.contextmanager
def without_training_autocast(model: PreTrainedModel) -> Iterator[None]:
    """Sets aside, for the pass, the autocast wrapper accelerate puts on a prepared model's
    ``forward`` under mixed precision (``unwrap_model`` keeps it, and stripping it for good would
    change the training model too): a pass that calls ``model(...)`` (the tagger's evaluation)
    would otherwise run at the training's precision instead of ``inference_autocast``'s, and a
    bf16 CPU run's evaluation would disagree with its saved model's fp32 one."""
    wrapped = model.__dict__.get("forward")
    original = model.__dict__.get("_original_forward")
    if wrapped is None or original is None:
        yield
        return
    model.forward = original
    try:
        yield
    finally:
        model.forward = wrapped


def encode_catalog(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    catalog: Catalog,
    *,
    mode: str = METRIC_INF,
    batch_size: int = 64,
    max_length: int = 128,
    cache_path: str | Path | None = None,
    show_progress: bool = False,
    across_processes: bool = False,
    precision: str = "auto",
) -> dict[str, np.ndarray]:
    """Embeds every item of ``catalog`` for a scoring ``mode``: one ``[N, hidden]`` matrix per view.

    The default mode, ``metric_inf``, gives one matrix per field; ``concat`` gives a single
    ``"concat"`` matrix of the fields joined by a space (see ``neighbours.catalog_views``).
    ``cache_path`` and the rest: ``encode_views``.
    """
    return encode_views(
        model,
        tokenizer,
        catalog_views(catalog, mode),
        batch_size=batch_size,
        max_length=max_length,
        cache_path=cache_path,
        show_progress=show_progress,
        across_processes=across_processes,
        precision=precision,
    )


def encode_views(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    views: dict[str, list[str]],
    *,
    batch_size: int = 64,
    max_length: int = 128,
    cache_path: str | Path | None = None,
    show_progress: bool = False,
    across_processes: bool = False,
    precision: str = "auto",
) -> dict[str, np.ndarray]:
    """Embeds each named list of texts of ``views``: one ``[len(texts), hidden]`` matrix per name.

    With ``cache_path``, the matrices are read from that ``.npz`` when its fingerprint (model
    weights and config, tokenizer, ``max_length``, names and texts) matches, and otherwise encoded
    and written there, replacing the cache it held; a file there that is not an embedding cache is
    never replaced (``check_cache_path``). When only the texts changed (items added to a catalog,
    some edited or removed) the texts the cache already holds, found by their digests, are read
    back and only the others encoded: a catalog of a million items that gains a thousand encodes a
    thousand items, not a million. ``across_processes`` shares the encoding among the processes of
    a distributed run (see ``encode_texts``), and process 0 alone writes the cache.

    ``precision`` (``inference_autocast``) is not part of the fingerprint: vectors encoded under
    bf16 on a GPU serve a later call on a CPU, as the batch size and the device, which also round
    them differently, do. The cache records it, and a call that reuses the cache says it.
    """

    def encode(texts: list[str]) -> np.ndarray:
        return encode_texts(
            model,
            tokenizer,
            texts,
            batch_size=batch_size,
            max_length=max_length,
            show_progress=show_progress,
            across_processes=across_processes,
            precision=precision,
        )

    if cache_path is None:
        return {name: encode(texts) for name, texts in views.items()}
    cache_path = check_cache_path(cache_path)
    fingerprint = embedding_fingerprint(model, tokenizer, views, max_length=max_length)
    cached = read_fingerprinted_npz(
        cache_path,
        fingerprint,
        [f"view:{name}" for name in views],
        holds="embeddings of another model, catalog or setting",
        cache="embedding cache",
        again="encoding what it lacks",
        optional=["precision"],
    )
    if cached is not None:
        # A cache written before the precision was recorded (2026-11-29) lacks it.
        encoded = f"encoded in {cached['precision']}" if "precision" in cached else "precision not recorded"
        logger.info("Reusing embeddings from %s (%s).", cache_path, encoded)
        return {name: cached[f"view:{name}"] for name in views}
    model_fingerprint = embedding_fingerprint(model, tokenizer, {}, max_length=max_length)
    earlier = EarlierVectors.read(cache_path, model_fingerprint)
    digests = {name: text_digests(texts) for name, texts in views.items()}
    encoded_in = precision_label(next(model.parameters()).device, precision)
    if earlier.rows:
        embeddings, encoded_in = earlier.updated(views, digests, encode, encoded_in, cache_path)
    else:
        embeddings = {name: encode(texts) for name, texts in views.items()}
    if not across_processes or not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0:
        # Once: every process holds the same vectors.
        write_embedding_cache(cache_path, fingerprint, model_fingerprint, embeddings, digests, encoded_in)
    return embeddings


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


class EarlierVectors:
    """The vectors an earlier embedding cache holds for the same model and settings, by text
    digest: what the encoding of a changed catalog reads back instead of encoding again."""

    def __init__(
        self, views: dict[str, np.ndarray], rows: dict[bytes, tuple[str, int]], precision: str
    ) -> None:
        self.views, self.rows, self.precision = views, rows, precision

    @classmethod
    def read(cls, path: Path, model_fingerprint: str) -> EarlierVectors:
        """The vectors of the cache at ``path`` when it was written for ``model_fingerprint`` and
        holds its texts' digests; none otherwise (no file, another model or ``max_length``, a
        cache written before the digests were kept, 2026-11-29)."""
        none = cls({}, {}, "")
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
                views = {name: stored[f"view:{name}"] for name in names}
                digests = {name: stored[f"digest:{name}"] for name in names}
                precision = str(stored["precision"])
        except (OSError, ValueError, KeyError):
            return none
        rows: dict[bytes, tuple[str, int]] = {}
        for name in names:
            for row, digest in enumerate(digests[name]):
                rows.setdefault(digest.tobytes(), (name, row))
        return cls(views, rows, precision)

    def updated(
        self,
        views: dict[str, list[str]],
        digests: dict[str, list[bytes]],
        encode: Callable[[list[str]], np.ndarray],
        precision: str,
        path: Path,
    ) -> tuple[dict[str, np.ndarray], str]:
        """The matrices of ``views`` (whose texts' ``digests`` are given): the vectors of the texts
        this cache holds read back, the others encoded by ``encode`` (once each, at ``precision``);
        and the precisions the result was encoded in."""
        missing = {
            digest: text
            for name, texts in views.items()
            for text, digest in zip(texts, digests[name], strict=True)
            if digest not in self.rows
        }
        encoded = encode(list(missing.values()))
        encoded_rows = {digest: row for row, digest in enumerate(missing)}
        total = sum(len(rows) for rows in digests.values())
        read_back = total - sum(digest in encoded_rows for rows in digests.values() for digest in rows)
        logger.info(
            "Updating the embeddings of %s: %d of %d texts read back, %d distinct texts encoded.",
            path,
            read_back,
            total,
            len(missing),
        )
        precisions = set(self.precision.split(", ")) if read_back else set()
        precisions |= {precision} if missing else set()
        matrices = {name: self._gathered(digests[name], encoded, encoded_rows) for name in views}
        return matrices, ", ".join(sorted(precisions))

    def _gathered(
        self, digests: list[bytes], encoded: np.ndarray, encoded_rows: dict[bytes, int]
    ) -> np.ndarray:
        """One view's matrix: each text's vector from ``encoded`` (row ``encoded_rows[digest]``)
        when it was encoded now, read back from the earlier cache otherwise."""
        matrix = np.empty((len(digests), encoded.shape[1]), dtype=np.float32)
        sources = [("", encoded), *self.views.items()]
        source_of = {name: index for index, (name, _) in enumerate(sources)}
        places = np.array(
            [
                (0, encoded_rows[digest])
                if digest in encoded_rows
                else (source_of[self.rows[digest][0]], self.rows[digest][1])
                for digest in digests
            ],
            dtype=np.int64,
        ).reshape(-1, 2)
        for index, (_, vectors) in enumerate(sources):
            chosen = places[:, 0] == index
            if chosen.any():
                matrix[chosen] = vectors[places[chosen, 1]]
        return matrix


def embedding_fingerprint(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    views: dict[str, list[str]],
    *,
    max_length: int,
) -> str:
    """A hex digest that changes whenever the embeddings of ``views`` could change."""
    digest = hashlib.blake2b(digest_size=20)

    def add(text: str) -> None:
        data = text.encode("utf-8")
        digest.update(len(data).to_bytes(8, "little") + data)

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
        digest.update(tensor.detach().cpu().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes())
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
    for name, texts in views.items():
        add(name)
        add(str(len(texts)))
        for text in texts:
            add(text)
    return digest.hexdigest()


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
    except (OSError, ValueError, EOFError):
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
) -> dict[str, np.ndarray] | None:
    """The arrays ``names`` of a cache at ``path`` that ``write_npz_whole`` wrote with a
    ``fingerprint`` array, when it was written for ``fingerprint``, and those of ``optional`` it
    holds (a cache written before they were kept lacks them). ``None`` when there is no file,
    when it was written for something else (said at info: ``path`` holds ``holds``; ``again``) and
    when it cannot be read or lacks an array of ``names`` (a warning naming the ``cache``): the
    caller then computes what it keeps again. One reader for the embedding, TF-IDF and lists
    caches, each saying so through its own module's ``log``."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as stored:
            if "fingerprint" not in stored.files or str(stored["fingerprint"]) != fingerprint:
                log.info("%s holds %s; %s.", path, holds, again)
                return None
            held = [name for name in optional if name in stored.files]
            return {name: stored[name] for name in [*names, *held]}
    except (OSError, ValueError, KeyError) as error:
        log.warning("Cannot read the %s %s (%s); %s.", cache, path, error, again)
        return None


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
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial.npz")
    try:
        np.savez(partial, **arrays)
        partial.replace(path)
    except OSError:
        partial.unlink(missing_ok=True)
        raise


# Inference precisions: "auto" is bf16 (fp16 where unsupported) on CUDA and fp32 elsewhere; "bf16"
# also autocasts on CPU, which CPUs with bf16 instructions (AMX, AVX512-BF16) encode 2.3 times as
# fast, the rankings moving within the training seeds' spread (docs/evaluation.md, "Encoding
# precision"; without them autocast emulates bf16, slower than fp32: RESULTS.md's "bf16 without
# AMX"); "fp32" never autocasts. "auto" stays fp32 on every CPU, so that the evaluations' numbers do
# not depend on a CPU's instruction set.
PRECISIONS = ("auto", "bf16", "fp32")


def inference_autocast(device: torch.device, precision: str = "auto") -> contextlib.AbstractContextManager:
    """The autocast context an inference forward runs under on ``device``, for ``precision``."""
    dtype = inference_dtype(device, precision)
    return contextlib.nullcontext() if dtype is None else torch.autocast(device_type=device.type, dtype=dtype)


def inference_dtype(device: torch.device, precision: str = "auto") -> torch.dtype | None:
    """The autocast dtype of ``precision`` on ``device``; ``None`` for none (fp32)."""
    if precision not in PRECISIONS:
        raise ValueError(f"Unknown precision {precision!r}; use one of {', '.join(PRECISIONS)}.")
    if precision == "fp32" or (precision == "auto" and device.type != "cuda"):
        return None
    if precision == "bf16" or torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float16


def precision_label(device: torch.device, precision: str = "auto") -> str:
    """What ``precision`` runs as on ``device``: ``fp32``, ``bf16`` or ``fp16``."""
    return {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[inference_dtype(device, precision)]
