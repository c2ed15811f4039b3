"""Embedding catalog texts with a MetricBERT (or any Hugging Face) encoder for ranking.

An item's vector for a view is the attention-masked mean of the encoder's last hidden layer,
the same pooling the model is trained with. Texts are batched in order of token length so a
batch pads to a similar length, which roughly halves the work on catalogs whose descriptions
vary a lot; the vectors come back in the original order. Encoding a whole catalog is the costly
part of an evaluation, so ``encode_catalog`` can keep the result in an ``.npz`` keyed by a
fingerprint of everything that determines it and reuse it while that stays the same, and encode
only the texts it lacks when the catalog changed (``embedding_cache``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from metricbert_trainer.base.attention import varying_shape_attention
from metricbert_trainer.base.distributed import (
    first_process_value,
    is_first_process,
    listed_in_shares,
    world_size,
)
from metricbert_trainer.base.node_memory import NodeArray
from metricbert_trainer.base.pooling import mean_pool
from metricbert_trainer.data.catalog import Catalog
from metricbert_trainer.data.lengths import catalog_token_ids
from metricbert_trainer.evaluation.embedding_cache import (
    UNREADABLE,
    EarlierVectors,
    check_cache_path,
    embedding_fingerprints,
    read_fingerprinted_npz,
    text_digests,
    texts_at,
    write_embedding_cache,
)
from metricbert_trainer.evaluation.encoding_progress import EncodingProgress, progress_folder
from metricbert_trainer.evaluation.neighbours import METRIC_INF, catalog_views

logger = logging.getLogger(__name__)


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
    out: NodeArray | None = None,
    first_process_only: bool = False,
) -> np.ndarray | None:
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

    ``out``: the array to write the vectors into (its dtype is theirs), from ``node_memory.node_array``:
    shared by the processes of a machine (with ``across_processes``), each machine's writer alone
    writes the gathered vectors and every process returns the shared array once they are there, so
    a machine holds one copy of them rather than one per process.

    ``first_process_only``: with ``across_processes``, process 0 alone receives the vectors and
    the others return ``None`` once they have encoded their share, for a caller whose process 0
    alone uses them (``metricbert encode``, which writes them out; the training evaluation, which
    ranks): the catalog's vectors are then held once, not once per process (31 GB each for the 20
    million MiniLM texts of ten million items).
    """
    texts = list(texts)
    if out is not None and out.sharers > 1 and not across_processes:
        raise ValueError("An array shared by a machine's processes is filled by encoding across_processes.")
    if out is not None and first_process_only:
        raise ValueError("An array shared by a machine's processes is received by all of them.")
    processes = world_size() if across_processes else 1
    receives = not first_process_only or processes == 1 or is_first_process()
    if not texts:
        if not receives:
            return None
        return out.array if out is not None else np.zeros((0, model.config.hidden_size), dtype=np.float32)
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1; got {batch_size}.")
    device = next(model.parameters()).device
    order = (
        longest_first(tokenizer, texts, max_length, across_processes=processes > 1, device=device)
        if lengths is None
        else np.argsort(-np.asarray(lengths), kind="stable")
    )
    if not receives:
        embeddings = None
    elif out is not None:
        embeddings = out.array
    else:
        embeddings = np.empty((len(texts), model.config.hidden_size), dtype=dtype)
    writes = receives and (out is None or out.writer)
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
    # Gathered GATHER_ROWS of each share at a time: the whole gather would hold every process's
    # vectors on each device at once (N x hidden floats: 31 GB for MiniLM's 20 million texts of ten
    # million items, 82 GB for BERT-Large's), beside the model.
    for start in range(0, share_size, GATHER_ROWS):
        part = torch.from_numpy(local[start : start + GATHER_ROWS]).to(device)
        pieces = [torch.empty_like(part) for _ in range(processes)]
        torch.distributed.all_gather(pieces, part)
        if writes:  # else another process of this machine writes the array this one reads, or none
            for rows, piece in zip(shares, pieces, strict=True):
                kept = rows[start : start + GATHER_ROWS]  # a shorter share's padding row is left out
                embeddings[kept] = piece[: len(kept)].cpu().numpy()
        # Gone before the next chunk's are made, which would otherwise be held beside them: twice
        # processes x GATHER_ROWS rows on each process (4 GiB on each of 8 BERT-Large processes).
        del part, pieces
    if out is not None and out.sharers > 1:
        torch.distributed.barrier()  # the writer has written every vector before any process reads
    return embeddings


# Rows of each process's share gathered at a time by a shared encoding (``encode_texts``).
GATHER_ROWS = 65536


def longest_first(
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    max_length: int,
    *,
    across_processes: bool = False,
    device: torch.device | str = "cpu",
) -> np.ndarray:
    """The positions of ``texts`` from the longest (in tokens, truncated) to the shortest, ties in
    order: a batch that does not fit in memory fails at once, not at the end, and each batch pads
    little. Tokenized a chunk at a time (``lengths.catalog_token_ids``): the fast tokenizer's encodings of
    every text at once took 6.5 GiB for 500,000 descriptions, which at a million items would not
    fit in 24 GiB (``benchmarks/million_items.py lengths``).

    ``across_processes``: in a distributed run each process counts the tokens of a share of the
    texts and every process receives all the counts (``distributed.listed_in_shares``, through
    ``device``), so all of them share the texts out alike. Each process counted every text before:
    116 s per two million wine descriptions on two cores, about 20 minutes in every process for the
    20 million texts of ten million items (projected), however many processes shared the encoding."""
    texts = list(texts)

    def counted(rows: torch.Tensor) -> torch.Tensor:
        start, stop = (int(rows[0]), int(rows[-1]) + 1) if len(rows) else (0, 0)
        share = texts[start:stop]
        counts = np.fromiter(
            (len(ids) for ids in catalog_token_ids(tokenizer, share, max_length)),
            dtype=np.int32,
            count=len(share),
        )
        return torch.from_numpy(counts)[:, None]

    processes = world_size() if across_processes else 1
    if 1 < processes <= len(texts):
        counts = listed_in_shares(counted, len(texts), device)
    else:
        counts = counted(torch.arange(len(texts)))
    return np.argsort(-counts[:, 0].numpy(), kind="stable")


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
    first_process_only: bool = False,
    cache_only: bool = False,
) -> dict[str, np.ndarray] | None:
    """Embeds every item of ``catalog`` for a scoring ``mode``: one ``[N, hidden]`` matrix per view.

    The default mode, ``metric_inf``, gives one matrix per field; ``concat`` gives a single
    ``"concat"`` matrix of the fields joined by a space (see ``neighbours.catalog_views``).
    ``cache_path``, ``first_process_only``, ``cache_only`` and the rest: ``encode_views``.
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
        first_process_only=first_process_only,
        cache_only=cache_only,
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
    first_process_only: bool = False,
    cache_only: bool = False,
) -> dict[str, np.ndarray] | None:
    """Embeds each named list of texts of ``views``: one ``[len(texts), hidden]`` matrix per name.

    With ``cache_path``, the matrices are read from that ``.npz`` when its fingerprint (model
    weights and config, tokenizer, ``max_length``, names and texts) matches, and otherwise encoded
    and written there, replacing the cache it held; a file there that is not an embedding cache is
    never replaced (``check_cache_path``). When only the texts changed (items added to a catalog,
    some edited or removed) the texts the cache already holds, found by their digests, are read
    back and only the others encoded: a catalog of a million items that gains a thousand encodes a
    thousand items, not a million. ``across_processes`` shares the encoding among the processes of
    a distributed run (see ``encode_texts``), and process 0 alone writes the cache.

    A call of one process that encodes keeps what it encoded a chunk at a time beside the cache
    (``encoding_progress``), so that a call stopped before it wrote the cache loses a chunk at most:
    the next reads the chunks back and encodes the rest.

    ``precision`` (``inference_autocast``) is not part of the fingerprint: vectors encoded under
    bf16 on a GPU serve a later call on a CPU, as the batch size and the device, which also round
    them differently, do. The cache records it, and a call that reuses the cache says it.

    ``first_process_only``: with ``across_processes``, process 0 alone receives the matrices, or
    reads them from the cache, and the others return ``None`` (``encode_texts``), for a caller
    whose process 0 alone uses them (the training evaluation's ranking): at ten million items each
    process would otherwise hold 31 GB of MiniLM vectors it never reads. Process 0 alone then
    checks the cache, and tells the others whether it matches or which texts to encode
    (``_encode_as_told``).

    ``cache_only``: the caller wants the cache at ``cache_path``, not the vectors (``metricbert
    encode``), and ``None`` is returned on every process: a cache that matches is checked but its
    vectors are not read, and in a shared encoding only process 0 holds the vectors, while it
    writes them.
    """
    if cache_only and cache_path is None:
        raise ValueError("cache_only needs a cache_path to write.")
    first_only = first_process_only or cache_only
    writer = not across_processes or is_first_process()
    returns = not cache_only and (writer or not first_only)
    # Process 0 alone checks the cache and tells the others what to encode (``_encode_as_told``).
    told = first_only and across_processes and world_size() > 1

    def encode(texts: list[str]) -> np.ndarray | None:
        return encode_texts(
            model,
            tokenizer,
            texts,
            batch_size=batch_size,
            max_length=max_length,
            show_progress=show_progress,
            across_processes=across_processes,
            precision=precision,
            first_process_only=first_only,
        )

    if cache_path is None:
        encoded = {name: encode(texts) for name, texts in views.items()}
        return encoded if returns else None
    cache_path = check_cache_path(cache_path)
    if told and not writer:
        _encode_as_told(views, encode)
        return None
    fingerprint, model_fingerprint = embedding_fingerprints(model, tokenizer, views, max_length=max_length)
    cached = read_fingerprinted_npz(
        cache_path,
        fingerprint,
        [f"view:{name}" for name in views],
        holds="embeddings of another model, catalog or setting",
        cache="embedding cache",
        again="encoding what it lacks",
        optional=["precision"],
        load=returns,
    )
    if cached is not None:
        if told:
            first_process_value(CACHE_MATCHES)
        # A cache written before the precision was recorded lacks it.
        encoded = f"encoded in {cached['precision']}" if "precision" in cached else "precision not recorded"
        logger.info("Reusing embeddings from %s (%s).", cache_path, encoded)
        EncodingProgress(
            progress_folder(cache_path), model_fingerprint
        ).remove()  # a stopped call's, now moot
        return {name: cached[f"view:{name}"] for name in views} if returns else None
    progress = None
    if not (across_processes and world_size() > 1):
        # Kept a chunk at a time beside the cache, so that a stopped call's work is read back next time.
        progress = EncodingProgress(progress_folder(cache_path), model_fingerprint)
        encode = partial(progress.encoded, encode=encode, width=model.config.hidden_size)
    earlier = EarlierVectors.read(cache_path, model_fingerprint)
    digests = {name: text_digests(texts) for name, texts in views.items()}
    encoded_in = precision_label(next(model.parameters()).device, precision)
    embeddings = None
    if earlier.rows:
        missing = earlier.missing(views, digests)
        if told:
            first_process_value(np.fromiter(missing.values(), dtype=np.int64, count=len(missing)))
        try:
            embeddings, encoded_in = earlier.updated(views, digests, missing, encode, encoded_in)
        except UNREADABLE as error:
            logger.warning(
                "Cannot read the embedding cache %s back (%s); encoding every text.", cache_path, error
            )
        if told:
            first_process_value(embeddings is not None)  # whether the others must encode every text
    elif told:
        first_process_value(EVERY_TEXT)
    if embeddings is None:
        embeddings = {name: encode(texts) for name, texts in views.items()}
    if writer:
        # Once: every process holds the same vectors, or (first_only) this one alone.
        write_embedding_cache(cache_path, fingerprint, model_fingerprint, embeddings, digests, encoded_in)
    if progress is not None:
        progress.remove()
    return embeddings if returns else None


# What process 0 of a shared encoding tells the others when it finds the cache matching, or holding
# nothing to read back; otherwise it sends the positions of the texts to encode (``texts_at``).
CACHE_MATCHES, EVERY_TEXT = "the cache matches", "every text"


def _encode_as_told(views: dict[str, list[str]], encode: Callable[[list[str]], np.ndarray | None]) -> None:
    """A process other than 0 of a shared encoding whose process 0 alone uses the vectors: it
    encodes its share of what process 0, which alone checks the cache and reads it, says is
    missing. It needs neither the cache's fingerprint nor the texts' digests, nor reads the cache:
    at a million items the digests of two million texts, and a read of 3 GiB for a cache that
    matches, in every process."""
    told = first_process_value(None)
    if isinstance(told, np.ndarray):  # an update: the texts the earlier cache lacks
        encode(texts_at(views, told))
        if first_process_value(None):
            return  # process 0 read the others back
    elif told == CACHE_MATCHES:
        return
    for texts in views.values():
        encode(texts)


# Inference precisions: "auto" is bf16 (fp16 where unsupported) on CUDA and fp32 elsewhere; "bf16"
# also autocasts on CPU, which CPUs with bf16 instructions (AMX, AVX512-BF16) encode 1.5 (Zen 4) to
# 2.3 (Zen 5) times as fast, the rankings moving within the training seeds' spread (docs/evaluation.md, "Encoding
# precision"; without them autocast emulates bf16 at a quarter of fp32's speed: RESULTS.md's
# "Encoding in bf16 on a CPU"); "fp32" never autocasts. "auto" stays fp32 on every CPU, so that the
# evaluations' numbers do not depend on a CPU's instruction set, nor its speed on bf16 emulation.
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
