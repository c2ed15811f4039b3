"""What a catalog of a million items costs: the guide cache, its storage, and neighbour search.

    python benchmarks/million_items.py keys --texts 200000 --tokens 128
    python benchmarks/million_items.py storage
    python benchmarks/million_items.py cache --texts 300000
    python benchmarks/million_items.py node-cache --texts 250000
    python benchmarks/million_items.py search --items 130000 --queries 2000
    python benchmarks/million_items.py search --items 1000000 --queries 1000 --indexes exact IVF1024,Flat
    python benchmarks/million_items.py exact-chunks --items 100000 1000000
    python benchmarks/million_items.py epoch --max-lengths 64 128 256
    python benchmarks/million_items.py tfidf --items 1000000
    python benchmarks/million_items.py lengths --texts 500000 2000000
    python benchmarks/million_items.py max-length --texts 1000000
    python benchmarks/million_items.py drawn-candidates --items 300000
    python benchmarks/million_items.py recommend --items 1000000
    python benchmarks/million_items.py index --items 1000000
    python benchmarks/million_items.py update-cache --items 1000000 --added 1000
    python benchmarks/million_items.py shared-encoding --texts 200000 --processes 1 2
    python benchmarks/million_items.py recommend --items 20000 --candidates 0 --all
    python benchmarks/million_items.py recommend --items 100000 --all --all-candidates 200 --recall-sample 500
    python benchmarks/million_items.py table-recall -- --model M --catalog C --all --output T --candidates 200
    python benchmarks/million_items.py start --items 100000
    python benchmarks/million_items.py neighbourhoods --items 10000 20000 40000
    python benchmarks/million_items.py neighbourhoods --items 130000 1000000 --indexes exact IVF1024,Flat
    python benchmarks/million_items.py shared-neighbours --items 5000 10000 20000
    python benchmarks/million_items.py shared-neighbours --items 100000 1000000 --candidates 200
    python benchmarks/million_items.py rerank --items 5000 10000 20000
    python benchmarks/million_items.py rerank --items 20000 100000 --candidates 200

``keys``: the guide cache (``metricbert/guide.py``) files every distinct text of the catalog (2
per item) under a key made from its token ids. Each way of keying runs in a fresh process on
synthetic token ids (as a tokenizer returns them, Python lists of ints), which reports its peak
and retained memory; the rows project both to two million texts.

``storage``: the cache keeps the vectors in fp32 (``2 x items x hidden x 4`` bytes). Would fp16 or
int8 (one scale per vector) do? Both development catalogs are encoded with the zero-shot MiniLM
(dev seeds only: this is a choice); the rows give the Metric_Inf ranking metrics from each
storage, and how often the guide's one verdict (a mined negative closer to the anchor than its
positive) flips against fp32 over in-batch candidates of random batches of 32 items.

``cache``: the guide cache itself (``StartingModelGuide.cache_embeddings``) filled with the
default encoder's vectors of ``--texts`` distinct synthetic texts (2-4 words of the wine
descriptions each, so encoding stays short; in fp32), in each ``--storages`` format
(``guide_embedding_cache_dtype``), each row a fresh process: the time, the cache's own size, and
the peak memory the call adds beside the loaded model and the texts' token rows. On a tree from
before the option (``PYTHONPATH=<worktree>``) every row is float32, as its "stored as" column
says, so its float32 row is the before of a before-and-after.

``node-cache``: the guide cache filled by ``--processes`` processes of one machine under
``accelerate launch`` (``node_cache_worker.py``; a random one-layer encoder of ``--hidden`` floats
a vector, since the cache's size depends on its vectors, not on the encoder's depth): the
processes' resident and proportional memory once all hold it, and the machine's peak above its
start. Run from a worktree of a tree before 2026-11-30 (``cd <worktree> && PYTHONPATH=<worktree>``)
its processes each hold a copy.

``search``: top-100 Metric_Inf neighbours (title and description views) from ``neighbours.top_k``,
exact or through a FAISS index with its candidates re-ranked exactly, for a sample of query items:
the wine sample's MiniLM vectors (encoded once, kept under ``outputs/``) and a synthetic catalog
of clustered vectors (items drawn around ``items / 50`` centres, each view with its own noise:
random vectors without structure are the worst case of every approximate index). Recall@100 is
the share of the exact list an index finds; each row is its own process (its peak RSS is its own)
and its time includes building the index.

``exact-chunks``: listing every item's neighbours exactly (``recommend --all --candidates 0``)
calls the scorer's search a chunk of items at a time (``recommendations.chunk_size``: 33 items a
chunk at a million). Each chunk searched by ``neighbours.top_k``, which checks and scales the
catalog's views at every call, beside ``neighbours.exact_searcher``, which does that once: the
median chunk each way over ``--chunks`` chunks (alternating), the one-time preparation, and the
whole listing projected from them. Synthetic clustered views (as ``search``), top 100.

``epoch``: what one epoch costs as a function of catalog size and text length. The catalog
recipe (``recipes/catalog/minilm.yaml``: batch 32, 4 length groups, MLM, guard, filter) on the
Debian catalog, whose descriptions are long, at each ``max_length``: the median optimizer step
(after 2 unmeasured steps) and the guide cache's time per item, under bf16 autocast and in fp32. An epoch over ``N`` items is then ``N / 32`` steps plus ``N`` items' cache, plus the
MLM-head warm-up, a fixed 100 head-only steps whatever ``N``.

``tfidf``: the hybrid ranking's share of ``metricbert recommend`` (``--tfidf-weight``, on by
default): per-field TF-IDF fitted on the catalog, then one query's distance row, on a catalog of
the wine sample's texts repeated to ``--items`` items; then the same through the TF-IDF cache that
``--cache`` keeps (``evaluation.tfidf_cache``), written by one process and read by the next.

``lengths``: every catalog text's token length, as the training run's ``max_length`` and truncation
report and the encoding's longest-first order need it, counted with every text tokenized at once
(before) or a chunk at a time, on wine descriptions drawn with replacement: time and the peak
memory it adds.

``max-length``: the ``max_length`` a training run chooses from a field of ``--texts`` texts (the
wine sample's and the Debian catalog's descriptions, drawn with replacement), from every text's
token length and from a sample of ``lengths.LENGTHS_SAMPLED`` (``data_driven_max_length``): each
way's 95th percentile, the ``max_length`` it gives, and its time.

``drawn-candidates``: the teacher's candidates (``--teacher_shared_neighbour_candidates 200``) of
``--items`` items drawn with replacement from the wine sample, about 26 copies of each at 300,000,
as ``start`` draws its catalog: the zero-shot MiniLM's vectors of the sample (cached), an HNSW32
index of the drawn rows (``indexed_unit_rows``) and ``faiss_candidate_pools``: how many items the
index returned too few for (compared with every item since 2026-11-30; the search raised), and
the time of building and of searching; then ``neighbours.top_k(backend="faiss")`` of the same
items (Metric_Inf, k=100, an HNSW32 index of its own searched with ``efSearch=256``), which raised
on such items too.

``recommend``: ``metricbert recommend --cache`` as a user runs it at ``--items`` items, twice: the
first call fits and lists what the caches keep, the second reads them back (an embedding cache of
synthetic vectors is written first, under the real model's fingerprint). With ``--all`` each call
writes every item's neighbours (``recommend --all --output``, a Parquet table left in the outputs
folder, named by the items and ``--all-candidates``) instead of one item's, each item's searched
among ``--all-candidates`` (``recommend --candidates``; 0 compares every pair), and with
``--recall-sample S`` compared with the exact ranking of ``S`` items (``table_recall``).
``table-recall`` compares a table already written (by any ``recommend --all`` command, whose
options follow ``--``) in the same way.

``index``: ``metricbert index`` of the same catalog and synthetic cache (the ``recommend`` run's
files when they are there), then ``metricbert recommend --index`` for three items, ``--calls``
times each, once more with the index's files dropped from the page cache (read from disk, as after a restart),
and ``recommend --item`` for each with the build's options (its caches read back): the build's
time and peak, each answer's, and whether both print the same listing.

``update-cache``: ``metricbert encode --cache`` on a catalog of ``--items`` items (the recommend
row's catalog and synthetic cache) that gained ``--added`` new items: the time and peak memory of
the whole command, which reads back every text the cache holds and encodes the new items' alone;
then the same command again, which reads the updated cache back whole (the memory a cache that
matches costs, beside which the update's is judged).

``shared-encoding``: ``--texts`` wine descriptions tokenized as a training's start does
(``TokenRows``), then encoded, by ``--processes`` processes of one machine under ``accelerate
launch`` (``encoding_worker.py``: a random one-layer encoder of ``--hidden`` floats, fast as a GPU
is beside a CPU's tokenizer): the slowest process's time for each, and each one's peak RSS. What it
shows is the work every process does besides its share (before 2026-11-30 each tokenized every
text, and counted every text's tokens to order the encoding); run from a worktree of an earlier
tree (``cd <worktree> && PYTHONPATH=<worktree>``) for the before.

``start``: the catalog recipe (``recipes/train_catalog.py``) as a user launches it, stopped after
two steps (``--max_steps 2``: one step's schedule would be all warm-up), on a catalog of ``--items`` wine texts drawn with replacement,
with the lists a large catalog needs searched (``--teacher_shared_neighbour_candidates 200``, an
``IVF1024,Flat`` index for the neighbourhoods): the wall time and peak memory of the whole command,
and the share of it spent tokenizing whole catalogs (every call of the tokenizer from
``lengths.catalog_token_ids``, counted in the run's own process) against tokenizing batches.
Texts drawn with replacement repeat, so the guide cache encodes only the sample's distinct texts:
the rows time what a catalog's size costs besides the encoding.

``neighbourhoods``: the recipes' batches of neighbourhoods (``batch_neighbourhood_size`` of
``recipes/catalog/minilm.yaml``) start with each item's nearest items under the frozen start
(``neighbourhood_batches.nearest_neighbours``), listed exactly (every item against every other:
``N^2 x 2 x hidden`` work) or through a FAISS index (``--indexes``, the ``neighbourhood_index``
option), then grouped greedily each epoch. Timed on clustered synthetic vectors of MiniLM's width
at each ``--items``; each row also gives the share of the exact lists an index finds and the
groups' cohesion (the mean cosine between two items of a group; random groups in brackets), which
is what the batches need, the process's peak RSS (the vectors' generator included) and the lists'
own peak above the vectors; the last column projects the exact lists' time to a million items by ``N^2``.
``--lists-from cache`` holds the two fields as a training run holds the guide's cache and lists
them as a run does; ``cache-via-matrix``, as runs did before 2026-11-29 (the lists' peak is then
counted above the fields).

``shared-neighbours``: the recipes' teacher with shared neighbours (``teacher_shared_neighbours``
of ``recipes/catalog/minilm.yaml``) lists each item's nearest items under the teacher's fused
ranking of the whole catalog before the first step (``shared_neighbours.teacher_neighbour_lists``:
every item against every other, the encoder's distances and the word-piece TF-IDF cosines of both
fields). Timed at each ``--items`` on the wine sample's texts drawn with replacement (real word
pieces, so the TF-IDF rows are as sparse as a catalog's) and clustered synthetic vectors of
MiniLM's width (encoding the texts would cost more than what is timed); the TF-IDF fit and rows
are timed apart from the lists, and the last column projects the lists to a million items by ``N^2``.
With ``--candidates C`` the lists are searched among each item's ``C`` nearest under the start
(``teacher_shared_neighbour_candidates``: an HNSW32 index), projected by ``N``, and compared with
the exact lists of ``--recall-sample`` items drawn at random, as ``rerank`` compares them.

``rerank``: the shared-neighbour re-ranking of ``metricbert evaluate`` and ``recommend``
(``--shared-neighbours``, ``evaluation.shared_neighbours``) lists each item's nearest items under
the hybrid ranking over the whole catalog before its first answer, even for one query. Timed as
``shared-neighbours`` is (the wine texts drawn with replacement for the hybrid's TF-IDF, clustered
synthetic vectors for the encoder's part): the hybrid's preparation (TF-IDF fitted on both fields)
apart from the lists, and the lists projected to a million items by ``N^2``. With
``--candidates C`` the lists are searched among each item's ``C`` nearest under the encoder
(``evaluation.candidate_lists``, found by ``--backend``: FAISS HNSW32 by default), projected by ``N``,
and compared with the exact lists of ``--recall-sample`` items drawn at random (their rows of the
hybrid against every item): the share of each exact list the searched one holds.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np
from ranking_130k import peak_rss_gib, repeat
from versus_sentence_transformers import cpu_name

REPO_ROOT = Path(__file__).resolve().parents[1]
OUTPUTS = REPO_ROOT / "outputs" / "million_items"
BENCHMARKS = {
    # name: catalog, dev annotations, max_length the recipe resolves for it
    "wines": ("data/wines/winemag-sample-5811.csv", "data/wines/proxy-annotations-100-seeds.csv", 128),
    "debian": ("data/debian/debian-packages-4000.csv", "data/debian/debtags-annotations-100-seeds.csv", 256),
}
TEXTS_AT_A_MILLION_ITEMS = 2_000_000
CATALOG_RECIPE = REPO_ROOT / "recipes" / "catalog" / "minilm.yaml"


def reset_peak_rss() -> None:
    """Restarts the process's peak RSS (``peak_rss_gib``) from its current RSS (Linux's
    ``/proc/self/clear_refs``), so that a phase's own peak is read apart from its set-up's."""
    with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
        handle.write("5")


def current_rss_gib() -> float:
    with open("/proc/self/statm", encoding="ascii") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30


def in_fresh_process(function, *arguments):
    """One run of ``function`` in a process of its own, so its peak RSS is its own."""
    return repeat(function, arguments, 1)[0]


def synthetic_token_ids(texts: int, tokens: int, seed: int) -> list[list[int]]:
    """Token ids as a tokenizer returns them: Python lists of ints, lengths around ``tokens``."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(tokens // 2, tokens + 1, size=texts)
    return [rng.integers(1000, 30_000, size=length).tolist() for length in lengths]


def key_texts(method: str, texts: int, tokens: int) -> dict:
    """Files ``texts`` synthetic texts as the guide cache would, with one way of keying."""
    from metricbert_trainer.data.lengths import TOKENIZING_CHUNK
    from metricbert_trainer.data.token_rows import token_key

    base = current_rss_gib()
    started = time.perf_counter()
    rows: dict = {}
    if method == "tuple of token ids, all texts tokenized at once":
        token_ids = synthetic_token_ids(texts, tokens, seed=0)
        rows = {tuple(ids): row for row, ids in enumerate(token_ids)}
        del token_ids
    else:  # the guide's keying: 128-bit digests, tokenized in chunks
        for start in range(0, texts, TOKENIZING_CHUNK):
            chunk = synthetic_token_ids(min(TOKENIZING_CHUNK, texts - start), tokens, seed=start)
            for row, ids in enumerate(chunk, start):
                rows[token_key(ids)] = row
    seconds = time.perf_counter() - started
    gc.collect()
    return {
        "seconds": seconds,
        "retained_gib": current_rss_gib() - base,
        "peak_gib": peak_rss_gib() - base,
        "rows": len(rows),
    }


def run_keys(arguments: argparse.Namespace) -> None:
    scale = TEXTS_AT_A_MILLION_ITEMS / arguments.texts
    print(
        f"{arguments.texts:,} texts of {arguments.tokens // 2}-{arguments.tokens} tokens; "
        f"projections x{scale:g} (two texts per item at a million items)\n"
    )
    print(
        "| keying | s | retained GiB | peak GiB | s at 2M texts | retained GiB at 2M | peak GiB at 2M |\n"
        "|---|---:|---:|---:|---:|---:|---:|"
    )
    for method in (
        "tuple of token ids, all texts tokenized at once",
        "128-bit digest, chunks of 4,096 texts",
    ):
        result = in_fresh_process(key_texts, method, arguments.texts, arguments.tokens)
        assert result["rows"] == arguments.texts
        print(
            f"| {method} | {result['seconds']:.1f} | {result['retained_gib']:.2f} | {result['peak_gib']:.2f} | "
            f"{result['seconds'] * scale:.0f} | {result['retained_gib'] * scale:.1f} | {result['peak_gib'] * scale:.1f} |",
            flush=True,
        )


def stored(vectors: np.ndarray, storage: str) -> np.ndarray:
    """``vectors`` as read back from a cache kept in ``storage``."""
    if storage == "fp32":
        return vectors
    if storage == "fp16":
        return vectors.astype(np.float16).astype(np.float32)
    scale = np.abs(vectors).max(axis=1, keepdims=True) / 127  # int8, one scale per vector
    return np.round(vectors / scale).astype(np.int8).astype(np.float32) * scale


def verdict_flips(reference: dict[str, np.ndarray], other: dict[str, np.ndarray], batches: int) -> float:
    """Share of (anchor, candidate) pairs of random 32-item batches where the guide's verdict
    "the candidate is closer to the title than its description is" differs between storages."""
    rng = np.random.default_rng(0)
    items = len(next(iter(reference.values())))
    flips = pairs = 0
    for _ in range(batches):
        batch = rng.choice(items, size=32, replace=False)
        verdicts = []
        for vectors in (reference, other):
            titles = normalised(vectors["title"][batch])
            elements = normalised(np.concatenate([vectors["title"][batch], vectors["description"][batch]]))
            similarity = titles @ elements.T  # [32 anchors, 64 elements]
            positive = similarity[np.arange(32), 32 + np.arange(32)]
            verdicts.append(similarity > positive[:, None])
        candidates = np.ones((32, 64), dtype=bool)
        candidates[np.arange(32), np.arange(32)] = candidates[np.arange(32), 32 + np.arange(32)] = False
        flips += int((verdicts[0] != verdicts[1])[candidates].sum())
        pairs += int(candidates.sum())
    return flips / pairs


def normalised(matrix: np.ndarray) -> np.ndarray:
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def encoded_benchmark(name: str) -> dict[str, np.ndarray]:
    """The zero-shot MiniLM's title and description vectors of a benchmark's catalog, cached."""
    from metricbert_trainer.base.modeling import DEFAULT_MODEL, resolve_model_name
    from metricbert_trainer.data.catalog import load_catalog
    from metricbert_trainer.evaluation.encoding import encode_catalog
    from metricbert_trainer.evaluation.scorers import load_encoder

    catalog_path, _, max_length = BENCHMARKS[name]
    model, tokenizer = load_encoder(resolve_model_name(DEFAULT_MODEL), device="cpu")
    OUTPUTS.mkdir(parents=True, exist_ok=True)
    return encode_catalog(
        model,
        tokenizer,
        load_catalog(REPO_ROOT / catalog_path),
        max_length=max_length,
        cache_path=OUTPUTS / f"{name}-minilm.npz",
        show_progress=True,
    )


def run_storage(arguments: argparse.Namespace) -> None:
    from metricbert_trainer.data.annotations import load_annotations
    from metricbert_trainer.data.catalog import load_catalog
    from metricbert_trainer.evaluation.evaluator import evaluate_vectors

    print(
        "| catalog (dev seeds) | storage | bytes per vector (384-d) | MPR | HR@100 | MAP | "
        "guide verdicts flipped against fp32 |\n|---|---|---:|---:|---:|---:|---:|"
    )
    for name in arguments.benchmarks:
        catalog_path, annotations_path, _ = BENCHMARKS[name]
        vectors = encoded_benchmark(name)
        annotations = load_annotations(REPO_ROOT / annotations_path, load_catalog(REPO_ROOT / catalog_path))
        for storage, width in (("fp32", 4 * 384), ("fp16", 2 * 384), ("int8", 384 + 4)):
            read_back = {view: stored(matrix, storage) for view, matrix in vectors.items()}
            metrics = evaluate_vectors(read_back, "angular", annotations)
            flips = verdict_flips(vectors, read_back, arguments.batches)
            print(
                f"| {name} | {storage} | {width} | {metrics['mpr']:.2f} | {metrics['hr@100']:.2f} | "
                f"{metrics['map']:.2f} | {flips:.2e} |",
                flush=True,
            )


def clustered_views(items: int, dim: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Two views of ``items`` synthetic items drawn around ``items / 50`` shared centres."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((max(1, items // 50), dim), dtype=np.float32)
    assignment = rng.integers(0, len(centres), size=items)
    views = {}
    for view in ("title", "description"):
        matrix = centres[assignment]
        matrix += 0.6 * rng.standard_normal((items, dim), dtype=np.float32)
        views[view] = matrix
    return views


def search(source: str, items: int, queries: int, index: str, parameters: str) -> dict:
    from metricbert_trainer.evaluation.neighbours import top_k

    if source == "wines":
        with np.load(OUTPUTS / "wines-minilm.npz") as cached:  # encoding.encode_catalog's cache
            vectors = {view: cached[f"view:{view}"] for view in ("title", "description")}
    else:
        vectors = clustered_views(items, 384)
    total = len(vectors["title"])
    sample = np.random.default_rng(1).choice(total, size=min(queries, total), replace=False)
    reset_peak_rss()  # the generator's own peak is not the search's
    data_gib = current_rss_gib()
    started = time.perf_counter()
    if index == "exact":
        found = top_k(vectors, "angular", 100, queries=sample)
    else:
        found = top_k(
            vectors,
            "angular",
            100,
            queries=sample,
            backend="faiss",
            faiss_index=index,
            faiss_parameters=parameters,
        )
    seconds = time.perf_counter() - started
    np.save(OUTPUTS / f"found-{source}-{total}-{index.replace(',', '_')}-{parameters}.npy", found.indices)
    return {"seconds": seconds, "search_gib": peak_rss_gib() - data_gib, "data_gib": data_gib, "items": total}


def run_exact_chunks(arguments: argparse.Namespace) -> None:
    from metricbert_trainer.evaluation.neighbours import exact_searcher, top_k
    from metricbert_trainer.evaluation.recommendations import chunk_size

    print(
        "| items | items a chunk | chunks timed | preparing once, s | a chunk through top_k, s | "
        "a chunk through the prepared search, s | ratio | whole listing projected, h: top_k -> prepared |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---|"
    )
    for items in arguments.items:
        vectors = clustered_views(items, 384)
        chunk = chunk_size(items)
        started = time.perf_counter()
        search = exact_searcher(vectors, "angular", 100)
        preparing = time.perf_counter() - started
        each_call, prepared = [], []
        for number in range(arguments.chunks):
            queries = np.arange(number * chunk, (number + 1) * chunk) % items
            started = time.perf_counter()
            found = top_k(vectors, "angular", 100, queries=queries)
            each_call.append(time.perf_counter() - started)
            started = time.perf_counter()
            again = search(queries)
            prepared.append(time.perf_counter() - started)
            assert np.array_equal(found.indices, again.indices) and np.array_equal(
                found.distances, again.distances
            )
        chunks = -(-items // chunk)
        before, after = statistics.median(each_call), statistics.median(prepared)
        print(
            f"| {items:,} | {chunk:,} | {arguments.chunks} | {preparing:.2f} | {before:.3f} | {after:.3f} | "
            f"{before / after:.2f} | {chunks * before / 3600:.2f} -> {(preparing + chunks * after) / 3600:.2f} |",
            flush=True,
        )
        del vectors, search


def run_search(arguments: argparse.Namespace) -> None:
    OUTPUTS.mkdir(parents=True, exist_ok=True)
    source = "wines" if arguments.items is None else "synthetic"
    if source == "wines":
        encoded_benchmark("wines")
    exact = None
    print(
        "| catalog | index | search settings | queries | s (index built and searched) | recall@100 | "
        "vectors and interpreter GiB | the search's peak above them, GiB |\n|---|---|---|---:|---:|---:|---:|---:|"
    )
    for index in arguments.indexes:
        for parameters in (
            arguments.parameters.get(index.split(",")[0].rstrip("0123456789"), [""])
            if index != "exact"
            else [""]
        ):
            result = in_fresh_process(search, source, arguments.items, arguments.queries, index, parameters)
            total = result["items"]
            found = np.load(OUTPUTS / f"found-{source}-{total}-{index.replace(',', '_')}-{parameters}.npy")
            if index == "exact":
                exact = found
            recall = (
                statistics.mean(
                    len(set(a) & set(b)) / found.shape[1] for a, b in zip(found, exact, strict=True)
                )
                if exact is not None
                else float("nan")
            )
            label = "wine sample, MiniLM" if source == "wines" else "synthetic, clustered"
            print(
                f"| {label}, {total:,} items | {index} | {parameters or '-'} | {len(found):,} | "
                f"{result['seconds']:.1f} | {recall:.4f} | {result['data_gib']:.2f} | {result['search_gib']:.2f} |",
                flush=True,
            )


def time_epoch_parts(max_length: int, precision: str, steps: int) -> dict:
    import tempfile

    from step_timer import StepTimer
    from versus_sentence_transformers import BATCH_SIZE, BF16, FP32, ON_CPU, our_trainer, time_guide_cache

    from metricbert_trainer.data.catalog import load_catalog

    warmup = 2
    catalog = REPO_ROOT / BENCHMARKS["debian"][0]
    items = load_catalog(catalog).dataset.shuffle(seed=0).select(range(BATCH_SIZE * (warmup + steps)))
    overrides = [
        "--catalog",
        str(catalog),
        "--eval_on_start",
        "false",
        "--mlm_head_warmup_steps",  # a fixed cost, timed in docs/scale_out.md's warm-up row
        "0",
        *(BF16 + ON_CPU if precision == "bf16" else FP32),  # bf16 without a GPU needs use_cpu
    ]
    timer = StepTimer()
    with tempfile.TemporaryDirectory() as output_dir:
        trainer = our_trainer(
            str(CATALOG_RECIPE),
            overrides,
            items,
            warmup + steps,
            output_dir,
            timer,
            max_length=max_length,
        )
        cache = time_guide_cache(trainer)
        trainer.train()
    args = trainer.args
    return {
        "precision": "bf16" if args.bf16 else "fp32",
        "step_seconds": statistics.median(timer.durations[warmup:]),
        "cache_seconds_per_item": sum(cache) / len(items),
        "batch": args.per_device_train_batch_size,
    }


def run_epoch(arguments: argparse.Namespace) -> None:
    print(
        "| max_length | precision | s per step (batch 32) | cache s per item | epoch h at 100K items "
        "| at 1M items |\n|---:|---|---:|---:|---:|---:|"
    )
    for max_length in arguments.max_lengths:
        for precision in ("bf16", "fp32"):
            result = in_fresh_process(time_epoch_parts, max_length, precision, arguments.steps)
            per_item = result["step_seconds"] / result["batch"] + result["cache_seconds_per_item"]
            print(
                f"| {max_length} | {result['precision']} | {result['step_seconds']:.2f} | "
                f"{result['cache_seconds_per_item']:.4f} | {per_item * 1e5 / 3600:.1f} | {per_item * 1e6 / 3600:.0f} |",
                flush=True,
            )


def tfidf_row(items: int, cache: str | None) -> dict:
    import pandas as pd

    from metricbert_trainer.data.catalog import load_catalog
    from metricbert_trainer.evaluation.scorers import TfidfScorer

    wines = pd.read_csv(REPO_ROOT / BENCHMARKS["wines"][0])
    frame = wines.sample(n=items, replace=True, random_state=0)[["title", "description"]]
    frame.insert(0, "id", [f"item-{index}" for index in range(items)])
    catalog = load_catalog(frame)
    data_gib = peak_rss_gib()
    started = time.perf_counter()
    TfidfScorer(cache_path=cache).distance_rows(catalog, [0])
    return {"seconds": time.perf_counter() - started, "peak_gib": peak_rss_gib(), "data_gib": data_gib}


def run_tfidf(arguments: argparse.Namespace) -> None:
    """Fitted without a cache, fitted and written to a TF-IDF cache (``--cache`` of ``evaluate`` and
    ``recommend`` keeps one beside the embeddings), then read back: each in a fresh process."""
    print(
        "| items | TF-IDF on both fields, then one query's row | s | peak RSS GiB | catalog and interpreter GiB |"
        " cache GiB |\n|---:|---|---:|---:|---:|---:|"
    )
    OUTPUTS.mkdir(parents=True, exist_ok=True)
    cache = OUTPUTS / f"tfidf-{arguments.items}.tfidf.npz"
    cache.unlink(missing_ok=True)
    for label, path in (
        ("fitted", None),
        ("fitted, written to the cache", cache),
        ("read from the cache", cache),
    ):
        result = in_fresh_process(tfidf_row, arguments.items, None if path is None else str(path))
        size = f"{path.stat().st_size / 2**30:.2f}" if path else "-"
        print(
            f"| {arguments.items:,} | {label} | {result['seconds']:.1f} | {result['peak_gib']:.2f} | "
            f"{result['data_gib']:.2f} | {size} |",
            flush=True,
        )
    cache.unlink()


def synthetic_texts(texts: int, seed: int = 0) -> list[str]:
    """``texts`` distinct texts of 2-4 words drawn from the wine descriptions' words (a drawn
    repeat is replaced), so that the guide cache encodes every one of them, briefly."""
    import pandas as pd

    wines = pd.read_csv(REPO_ROOT / BENCHMARKS["wines"][0]).dropna(subset=["description"])
    words = sorted({word for text in wines.description for word in re.findall(r"[a-z]+", text.lower())})
    rng = np.random.default_rng(seed)
    drawn: dict[str, None] = {}
    while len(drawn) < texts:
        for length in rng.integers(2, 5, size=texts - len(drawn)):
            drawn[" ".join(words[i] for i in rng.integers(0, len(words), size=length))] = None
    return list(drawn)


def cache_on_cpu(
    guide, tokenizer, texts: list[str], tokens, *, max_length: int, batch_size: int, **options
) -> float:
    """``guide.cache_embeddings`` of ``texts`` (their ``TokenRows`` ``tokens``, cut at ``max_length``)
    on the CPU without autocast, as the benchmarks fill the cache; its seconds. ``options``: the
    call's others (``storage``)."""
    import contextlib

    import torch

    started = time.perf_counter()
    guide.cache_embeddings(
        tokenizer,
        texts,
        keys=tokens.keys,
        lengths=tokens.lengths,
        max_length=max_length,
        device=torch.device("cpu"),
        autocast=contextlib.nullcontext,
        batch_size=batch_size,
        **options,
    )
    return time.perf_counter() - started


def cache_row(texts: int, storage: str) -> dict:
    """The guide cache of ``texts`` distinct synthetic texts in ``storage``, in a process of its own."""
    import inspect

    from transformers import AutoTokenizer

    from metricbert_trainer.base.modeling import DEFAULT_MODEL, load_masked_lm, resolve_model_name
    from metricbert_trainer.data.token_rows import TokenRows
    from metricbert_trainer.metricbert.guide import StartingModelGuide

    name = resolve_model_name(DEFAULT_MODEL)
    tokenizer = AutoTokenizer.from_pretrained(name)
    guide = StartingModelGuide(load_masked_lm(name))
    column = synthetic_texts(texts)
    tokens = TokenRows.tokenize(tokenizer, column, max_length=128)
    # A tree from before guide_embedding_cache_dtype has no ``storage``: its cache is float32.
    known = "storage" in inspect.signature(guide.cache_embeddings).parameters
    gc.collect()
    # The call's own peak, apart from the higher one reading the texts may have reached.
    reset_peak_rss()
    before = current_rss_gib()
    seconds = cache_on_cpu(
        guide,
        tokenizer,
        column,
        tokens,
        max_length=128,
        batch_size=32,
        **({"storage": storage} if known else {}),
    )
    return {
        "seconds": seconds,
        "storage": str(guide.cache_matrix().dtype).removeprefix("torch."),
        "cache_gib": guide.cache_matrix().nbytes / 2**30,
        "added_gib": peak_rss_gib() - before,
        "tokens": float(np.mean(tokens.lengths)),
    }


def run_cache(arguments: argparse.Namespace) -> None:
    print(
        "| texts | mean tokens | stored as | s | cache GiB | peak RSS added, GiB |\n|---:|---:|---|---:|---:|---:|"
    )
    for texts in arguments.texts:
        for storage in arguments.storages:
            row = in_fresh_process(cache_row, texts, storage)
            print(
                f"| {texts:,} | {row['tokens']:.1f} | {row['storage']} | {row['seconds']:.1f} | "
                f"{row['cache_gib']:.2f} | {row['added_gib']:.2f} |",
                flush=True,
            )


def machine_used_gib() -> float:
    """The memory this machine's processes hold, shared memory included: MemTotal - MemAvailable."""
    fields = {
        line.split(":")[0]: int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
    }
    return (fields["MemTotal"] - fields["MemAvailable"]) / 2**20


def machine_peak_added_by(command: list[str]) -> tuple[subprocess.CompletedProcess, float]:
    """``command`` run to its end (an error if it fails), and the most memory this machine held
    meanwhile above what it held before it, in GiB (``machine_used_gib`` every 0.1 s): what a
    launch of several processes costs, where one process's peak says only its own part."""
    import threading

    start = machine_used_gib()
    peak = [start]
    running = threading.Event()
    running.set()

    def sample() -> None:
        while running.is_set():
            peak[0] = max(peak[0], machine_used_gib())
            time.sleep(0.1)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        finished = subprocess.run(command, check=True, capture_output=True, text=True)
    finally:
        running.clear()
        sampler.join()
    return finished, peak[0] - start


def cpu_launch(processes: int) -> list[str]:
    """The start of an ``accelerate launch`` of ``processes`` CPU processes (one thread each), as
    ``accelerate_configs/cpu.yaml`` runs them; the script or ``-m`` module and its options follow."""
    import sys

    return [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", str(REPO_ROOT / "accelerate_configs" / "cpu.yaml"),
        "--num_processes", str(processes), "--num_cpu_threads_per_process", "1", "--mixed_precision", "no",
    ]  # fmt: skip


def launched_ranks(worker: str, processes: int, *options: str) -> tuple[list[dict], float]:
    """The benchmark script ``worker`` launched on ``processes`` CPU processes with ``options`` and
    ``--output FOLDER``: each process's record (``FOLDER/rank<R>.json``), in rank order, and the
    machine's peak above its start (``machine_peak_added_by``)."""
    import json
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        command = [
            *cpu_launch(processes),
            str(Path(__file__).with_name(worker)),
            *options,
            "--output",
            folder,
        ]
        _, added = machine_peak_added_by(command)
        return [json.loads(path.read_text()) for path in sorted(Path(folder).glob("rank*.json"))], added


def wide_random_encoder(tokenizer, hidden: int, model_class):
    """A randomly initialised one-layer BERT ``model_class`` of ``hidden`` floats a vector: what the
    processes' vectors cost depends on how many there are and how wide, not on the encoder's
    depth, and one layer keeps the encoding short on a CPU."""
    import torch
    from transformers import BertConfig

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=hidden,
        num_hidden_layers=1,
        num_attention_heads=hidden // 64,
        intermediate_size=256,
    )
    return model_class(config)


def run_node_cache(arguments: argparse.Namespace) -> None:
    """The guide's cache filled by ``--processes`` processes of one machine (``node_cache_worker.py``
    under ``accelerate launch``): each process's resident and proportional memory once all hold it,
    and the machine's peak above what it held before the launch, sampled every 0.1 s."""
    print(
        "| processes | texts | floats a vector | cache GiB (one copy) | processes sharing it | s | "
        "RSS summed GiB | PSS summed GiB | machine's peak above its start GiB |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    for texts in arguments.texts:
        ranks, added = launched_ranks(
            "node_cache_worker.py",
            arguments.processes,
            "--texts",
            str(texts),
            "--hidden",
            str(arguments.hidden),
        )
        print(
            f"| {arguments.processes} | {texts:,} | {arguments.hidden} | {ranks[0]['cache_gib']:.2f} | "
            f"{ranks[0]['sharers']} | {max(rank['seconds'] for rank in ranks):.1f} | "
            f"{sum(rank['rss'] for rank in ranks):.2f} | {sum(rank['pss'] for rank in ranks):.2f} | "
            f"{added:.2f} |",
            flush=True,
        )


def run_ranking(arguments: argparse.Namespace) -> None:
    """The training evaluation's ranking by ``--processes`` processes of one machine
    (``ranking_worker.py`` under ``accelerate launch``): each process's time and peak resident
    memory, and the machine's peak above what it held before the launch, sampled every 0.1 s."""
    print(
        "| processes | items | seeds | floats a vector | vectors GiB (one copy) | s | MPR | "
        "peak RSS per process GiB | machine's peak above its start GiB |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---|---:|"
    )
    for items in arguments.items:
        ranks, added = launched_ranks(
            "ranking_worker.py",
            arguments.processes,
            *("--items", str(items), "--seeds", str(arguments.seeds), "--hidden", str(arguments.hidden)),
        )
        peaks = ", ".join(f"{rank['peak_rss_gib']:.2f}" for rank in ranks)
        print(
            f"| {arguments.processes} | {items:,} | {arguments.seeds} | {arguments.hidden} | "
            f"{2 * items * arguments.hidden * 4 / 2**30:.2f} | {max(rank['seconds'] for rank in ranks):.1f} | "
            f"{ranks[0]['mpr']:.2f} | {peaks} | {added:.2f} |",
            flush=True,
        )


def run_shared_encoding(arguments: argparse.Namespace) -> None:
    """``TokenRows`` and ``encode_texts`` across ``--processes`` processes of one machine
    (``encoding_worker.py`` under ``accelerate launch``): the slowest process's time for each, and
    each one's peak resident memory."""
    print(
        "| processes | texts | token rows, s | encoding, s (floats a vector) | peak RSS per process GiB |\n"
        "|---:|---:|---:|---:|---|"
    )
    for texts in arguments.texts:
        for processes in arguments.processes:
            ranks, _ = launched_ranks(
                "encoding_worker.py", processes, "--texts", str(texts), "--hidden", str(arguments.hidden)
            )
            peaks = ", ".join(f"{rank['peak_rss_gib']:.2f}" for rank in ranks)
            tokens = max(rank["token_rows_seconds"] for rank in ranks)
            seconds = max(rank["seconds"] for rank in ranks)
            print(
                f"| {processes} | {texts:,} | {tokens:.1f} | {seconds:.1f} ({arguments.hidden}) | {peaks} |",
                flush=True,
            )


def lengths_row(texts: int, way: str) -> dict:
    """Token lengths of ``texts`` wine descriptions drawn with replacement, in a process of its own:
    every text tokenized at once (how the catalog's lengths were counted before), or a chunk at a
    time (``lengths.token_lengths``, ``encoding.longest_first``)."""
    import pandas as pd
    from transformers import AutoTokenizer

    from metricbert_trainer.base.modeling import DEFAULT_MODEL, resolve_model_name
    from metricbert_trainer.data.lengths import token_lengths
    from metricbert_trainer.evaluation.encoding import longest_first

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_name(DEFAULT_MODEL))
    wines = pd.read_csv(REPO_ROOT / BENCHMARKS["wines"][0]).dropna(subset=["description"])
    column = wines.description.sample(n=texts, replace=True, random_state=0).astype(str).tolist()
    before = peak_rss_gib()
    started = time.perf_counter()
    if way == "every text at once":
        [len(ids) for ids in tokenizer(column, truncation=False, verbose=False)["input_ids"]]
    elif way == "a chunk at a time (token_lengths)":
        token_lengths(tokenizer, column)
    else:
        longest_first(tokenizer, column, 128)
    return {"seconds": time.perf_counter() - started, "added_gib": peak_rss_gib() - before}


def run_drawn_candidates(arguments: argparse.Namespace) -> None:
    import logging

    import faiss

    from metricbert_trainer.evaluation.candidate_lists import faiss_candidate_pools, indexed_unit_rows
    from metricbert_trainer.evaluation.neighbours import top_k

    logging.basicConfig(level=logging.WARNING)
    vectors = encoded_benchmark("wines")
    count = len(vectors["title"])
    matrix = np.concatenate([vectors["title"], vectors["description"]])
    drawn = np.random.default_rng(0).integers(0, count, arguments.items)
    started = time.perf_counter()
    indexed = indexed_unit_rows(matrix, {"title": drawn, "description": drawn + count})
    built = time.perf_counter() - started
    started = time.perf_counter()
    pools = list(faiss_candidate_pools(indexed, 200))
    searched_seconds = time.perf_counter() - started
    short = []
    for rows, _ in pools:  # searched again, untimed: which items the index alone left short
        _, searched = indexed.index.search(indexed.stacked[rows], 201)
        short.append(rows[(searched < 0).any(axis=1)])
    short = np.concatenate(short)
    print(
        "| items | distinct wines | items the index found too few for | index built, s | candidates, s |\n"
        f"|---:|---:|---:|---:|---:|\n| {arguments.items:,} | {count:,} | {len(short):,} | {built:.1f} | "
        f"{searched_seconds:.1f} |"
    )
    for width in (1024, 4096, 16384):  # whether a wider search reaches them
        faiss.ParameterSpace().set_index_parameters(indexed.index, f"efSearch={width}")
        _, searched = indexed.index.search(indexed.stacked[short], 201)
        print(f"efSearch={width}: {int((searched < 0).any(axis=1).sum()):,} of them still short")
    del indexed, pools
    views = {"title": matrix[drawn], "description": matrix[drawn + count]}
    started = time.perf_counter()
    lists = top_k(
        views, "angular", k=100, backend="faiss", faiss_index="HNSW32", faiss_parameters="efSearch=256"
    )
    print(
        f"neighbours.top_k(backend='faiss', faiss_index='HNSW32', faiss_parameters='efSearch=256', k=100), "
        f"Metric_Inf: "
        f"{time.perf_counter() - started:.1f} s, every list full: {bool(np.isfinite(lists.distances).all())}"
    )


def run_max_length(arguments: argparse.Namespace) -> None:
    import math

    import pandas as pd
    from transformers import AutoTokenizer

    from metricbert_trainer.base.modeling import DEFAULT_MODEL, resolve_model_name
    from metricbert_trainer.data.lengths import LENGTH_MULTIPLE, LENGTHS_SAMPLED, length_sample, token_lengths

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_name(DEFAULT_MODEL))
    print(
        "| descriptions | texts | counted | 95th percentile, tokens | max_length (cap 256) | s |\n"
        "|---|---:|---|---:|---:|---:|"
    )
    for name, (catalog, _, _) in BENCHMARKS.items():
        column = pd.read_csv(REPO_ROOT / catalog).dropna(subset=["description"]).description.astype(str)
        for texts in arguments.texts:
            drawn = column.sample(n=texts, replace=True, random_state=0).tolist()
            for way, measured in (
                ("every text", drawn),
                (f"a sample of {LENGTHS_SAMPLED:,}", length_sample(drawn, LENGTHS_SAMPLED)),
            ):
                started = time.perf_counter()
                percentile = float(np.percentile(token_lengths(tokenizer, measured), 95))
                seconds = time.perf_counter() - started
                chosen = min(LENGTH_MULTIPLE * math.ceil(percentile / LENGTH_MULTIPLE), 256)
                print(
                    f"| {name} | {texts:,} | {way} | {percentile:.1f} | {chosen} | {seconds:.1f} |",
                    flush=True,
                )


def run_lengths(arguments: argparse.Namespace) -> None:
    print("| texts | counted | s | peak RSS added, GiB |\n|---:|---|---:|---:|")
    for texts in arguments.texts:
        ways = ["a chunk at a time (token_lengths)", "a chunk at a time, truncated (longest_first)"]
        if texts <= arguments.at_once_up_to:
            ways.insert(0, "every text at once")
        for way in ways:
            row = in_fresh_process(lengths_row, texts, way)
            print(f"| {texts:,} | {way} | {row['seconds']:.1f} | {row['added_gib']:.2f} |", flush=True)


def recipe_neighbourhood_size() -> int:
    """The group size the any-catalog recipe trains with (``MetricBertConfig``'s default, which
    the recipe keeps), so the timing follows its default."""
    from metricbert_trainer.metricbert.config import MetricBertConfig

    return MetricBertConfig.batch_neighbourhood_size


def neighbourhood_lists_file(items: int, index: str) -> Path:
    return OUTPUTS / f"neighbours-{items}-{re.sub(r'[^A-Za-z0-9]+', '_', index)}.npy"


def neighbourhood_row(items: int, size: int, index: str, parameters: str, source: str = "matrix") -> dict:
    """One way of listing the neighbours, in a process of its own: the lists' and one epoch's
    groups' time, the groups' cohesion (mean cosine between two items of a group) and peak RSS.
    ``source``: ``"matrix"`` lists from the item matrix, the data the lists' peak is counted
    above; ``"cache"`` holds the two fields as a run holds the guide's cache and lists as a run
    does (``neighbours_of_fields``), ``"cache-via-matrix"`` as runs did before 2026-11-29 (the item
    matrix built beside the fields, then listed). The lists are kept on disk so the parent can
    compare them with the exact ones."""
    import torch

    from metricbert_trainer.metricbert.neighbourhood_batches import (
        candidates_per_item,
        item_vectors,
        nearest_neighbours,
        neighbourhood_groups,
        neighbours_of_fields,
    )

    views = clustered_views(items, 384)
    fields = [torch.from_numpy(views["title"]), torch.from_numpy(views["description"])]
    if source == "matrix":
        vectors = item_vectors(fields)
        del views, fields
    generator_gib = peak_rss_gib()
    reset_peak_rss()  # the generator's own peak is not the lists'
    data_gib = current_rss_gib()
    started = time.perf_counter()
    settings = {"index": index, "search_parameters": parameters}
    if source == "cache":
        neighbours = neighbours_of_fields(
            fields, [np.arange(items)] * 2, candidates_per_item(size), **settings
        )
    else:
        if source == "cache-via-matrix":
            vectors = item_vectors(fields)
        neighbours = nearest_neighbours(vectors, candidates_per_item(size), **settings)
    lists = time.perf_counter() - started
    lists_gib = peak_rss_gib() - data_gib
    if source == "cache":
        vectors = item_vectors(fields)  # for the groups' cohesion, after the lists' peak
    started = time.perf_counter()
    groups = neighbourhood_groups(neighbours, size, torch.Generator().manual_seed(0))
    grouping = time.perf_counter() - started
    OUTPUTS.mkdir(parents=True, exist_ok=True)
    np.save(neighbourhood_lists_file(items, index), neighbours.numpy())
    random_groups = torch.randperm(items, generator=torch.Generator().manual_seed(0))
    return {
        "lists": lists,
        "groups": grouping,
        "cohesion": group_cohesion(vectors, [group for group in groups if len(group) == size]),
        "random_cohesion": group_cohesion(
            vectors, random_groups[: items // size * size].view(-1, size).tolist()
        ),
        "peak_gib": max(generator_gib, peak_rss_gib()),
        "lists_gib": lists_gib,
    }


def group_cohesion(vectors, groups: list[list[int]]) -> float:
    """Mean cosine between two different items of the same group (unit item vectors)."""
    import torch

    total, pairs = 0.0, 0
    for start in range(0, len(groups), 4096):
        members = vectors[torch.tensor(groups[start : start + 4096])]  # [G, size, H]
        cosines = members @ members.transpose(1, 2)
        size = members.shape[1]
        total += float(cosines.sum() - cosines.diagonal(dim1=1, dim2=2).sum())
        pairs += len(members) * size * (size - 1)
    return total / pairs


def list_overlap(items: int, index: str) -> float | None:
    """The share of the exact lists' entries an index's lists hold (when the exact ones were run)."""
    exact = neighbourhood_lists_file(items, "exact")
    if index == "exact" or not exact.is_file():
        return None
    found, truth = np.load(neighbourhood_lists_file(items, index)), np.load(exact)
    hits = sum(len(np.intersect1d(a, b, assume_unique=True)) for a, b in zip(found, truth, strict=True))
    return hits / truth.size


def search_parameters_of(index: str, named: str | None) -> str:
    """The search settings of ``index`` in the neighbourhoods' table: those ``named`` on the
    command line, else ``nprobe=16`` for an IVF index (FAISS probes one list unless told more, and
    the library refuses that) and none for the others. Why per index: one default for every index
    gave HNSW an ``nprobe`` it has no such setting for, and the command stopped."""
    if index == "exact":
        return ""
    if named is not None:
        return named
    return "nprobe=16" if "IVF" in index else ""


def run_neighbourhoods(arguments: argparse.Namespace) -> None:
    from metricbert_trainer.metricbert.neighbourhood_batches import candidates_per_item

    size = recipe_neighbourhood_size()
    print(
        f"| items | lists | nearest {candidates_per_item(size)} of each item (s) | share of the exact lists | "
        f"mean cosine in a group of {size} (random groups) | one epoch's groups (s) | peak RSS GiB | "
        "the lists' peak above the vectors, GiB | lists at 1M items, by N^2 (h) |\n"
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|"
    )
    for items in arguments.items:
        for index in arguments.indexes:
            if index == "exact" and items > arguments.exact_up_to:
                continue
            parameters = search_parameters_of(index, arguments.search_parameters)
            result = in_fresh_process(neighbourhood_row, items, size, index, parameters, arguments.lists_from)
            overlap = list_overlap(items, index)
            projected = result["lists"] * (1_000_000 / items) ** 2 / 3600 if index == "exact" else None
            label = index if not parameters else f"{index}, {parameters}"
            print(
                f"| {items:,} | {label} | {result['lists']:.1f} | "
                f"{'-' if overlap is None else f'{overlap:.3f}'} | {result['cohesion']:.3f} "
                f"({result['random_cohesion']:.3f}) | {result['groups']:.2f} | {result['peak_gib']:.2f} | "
                f"{result['lists_gib']:.2f} | "
                f"{'-' if projected is None else f'{projected:.1f}'} |",
                flush=True,
            )


def recipe_shared_neighbours() -> int:
    """The teacher's shared-neighbour count the any-catalog recipe trains with (``MetricBertConfig``'s
    default, which the recipe keeps)."""
    from metricbert_trainer.metricbert.config import MetricBertConfig

    return MetricBertConfig.teacher_shared_neighbours


def shared_neighbours_row(
    items: int, neighbours: int, candidates: int = 0, views: str = "fields", recall_sample: int = 0
) -> dict:
    """The TF-IDF fit and rows, then the lists, at ``items`` items, in a process of its own: exact,
    or searched among ``candidates`` (``teacher_shared_neighbour_candidates``), then compared with
    the exact lists of ``recall_sample`` items (their teacher rows against every item). ``views``:
    the start's vectors as a tensor per field (``fields``), or as the trainer reads them, rows of
    one cache (the guide's) gathered at unit length beside the index (``gathered``,
    ``unit_rows_of``) or into the index's own storage (``indexed``, ``indexed_unit_rows``); the
    time of the lists includes the views'."""
    import pandas as pd
    import torch
    from transformers import AutoTokenizer

    from metricbert_trainer.base.modeling import resolve_model_name
    from metricbert_trainer.evaluation.candidate_lists import indexed_unit_rows, list_recall, unit_rows_of
    from metricbert_trainer.metricbert.config import MetricBertConfig
    from metricbert_trainer.metricbert.shared_neighbours import (
        teacher_candidate_lists,
        teacher_distance_rows,
        teacher_neighbour_lists,
    )
    from metricbert_trainer.metricbert.token_tfidf import fitted_catalog_vectors

    catalog, _, max_length = BENCHMARKS["wines"]
    frame = pd.read_csv(REPO_ROOT / catalog).sample(n=items, replace=True, random_state=0)
    columns = {name: [str(text) for text in frame[name]] for name in ("title", "description")}
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_name("sentence-transformers/all-MiniLM-L6-v2"))
    encoder = [torch.from_numpy(view) for view in clustered_views(items, 384).values()]
    if views != "fields":
        # One matrix of every text's vector, as the guide's cache holds them; the fields are its rows.
        cache = torch.cat(encoder)
        encoder = list(cache.split(items))
    started = time.perf_counter()
    _, matrices = fitted_catalog_vectors(tokenizer, columns, max_length)
    fitted = time.perf_counter() - started
    options = {"tfidf_weight": MetricBertConfig.teacher_tfidf_weight, "neighbours": neighbours}
    started = time.perf_counter()
    if not candidates:
        teacher_neighbour_lists(encoder, matrices, **options)
        return {"prepared": fitted, "lists": time.perf_counter() - started, "peak_gib": peak_rss_gib()}
    peak_before = peak_rss_gib()
    reset_peak_rss()
    resident = peak_rss_gib()  # what the listing starts with: cache, TF-IDF rows, tokenizer
    searched = encoder
    if views != "fields":
        gather = {"gathered": unit_rows_of, "indexed": indexed_unit_rows}[views]
        searched = gather(
            cache.numpy(), {"title": np.arange(items), "description": np.arange(items, 2 * items)}
        )
    lists = teacher_candidate_lists(searched, matrices, candidates=candidates, **options)
    listing = peak_rss_gib()
    row = {
        "prepared": fitted,
        "lists": time.perf_counter() - started,
        "peak_gib": max(peak_before, listing),
        "listing_added_gib": listing - resident,
    }
    if recall_sample:
        sample = torch.from_numpy(np.random.default_rng(1).choice(items, size=recall_sample, replace=False))
        # 50 rows against every item at a time: [50, N] for each of the fusion's temporaries.
        exact = torch.cat(
            [
                teacher_distance_rows(encoder, matrices, rows, tfidf_weight=options["tfidf_weight"])
                .topk(neighbours, dim=1, largest=False)
                .indices
                for rows in sample.split(50)
            ]
        )
        row["recall"] = list_recall(lists[sample].numpy(), exact.numpy())
        row["peak_with_ranker_gib"] = max(peak_before, peak_rss_gib())
    return row


def print_list_timings(row, items: list[int], neighbours: int, prepared: str) -> None:
    """One table row per catalog size: ``row`` (items, neighbours) in a fresh process, returning
    the preparation's and the lists' seconds and peak RSS; the lists projected to 1M items by ``N^2``."""
    print(
        f"| items | {prepared} (s) | nearest {neighbours} of each item (s) | peak RSS GiB | "
        "lists at 1M items, by N^2 (h) |\n|---:|---:|---:|---:|---:|"
    )
    for count in items:
        result = in_fresh_process(row, count, neighbours)
        projected = result["lists"] * (1_000_000 / count) ** 2 / 3600
        print(
            f"| {count:,} | {result['prepared']:.1f} | {result['lists']:.1f} | {result['peak_gib']:.2f} | "
            f"{projected:.1f} |",
            flush=True,
        )


def run_shared_neighbours(arguments: argparse.Namespace) -> None:
    if arguments.candidates:
        print_candidate_timings(
            shared_neighbours_row, arguments, recipe_shared_neighbours(), "TF-IDF fitted", arguments.views
        )
        return
    print_list_timings(
        shared_neighbours_row, arguments.items, recipe_shared_neighbours(), "TF-IDF fit and rows"
    )


def rerank_row(
    items: int, neighbours: int, candidates: int = 0, backend: str = "exact", recall_sample: int = 0
) -> dict:
    """The hybrid's preparation, then the re-ranking's lists, at ``items`` items, in a process of its
    own: exact, or searched among ``candidates`` found by ``backend`` (``evaluation.candidate_lists``),
    then compared with the exact lists of ``recall_sample`` items."""
    from dataclasses import dataclass

    import pandas as pd

    from metricbert_trainer.base.distances import Distance
    from metricbert_trainer.data.catalog import load_catalog
    from metricbert_trainer.evaluation.candidate_lists import (
        candidate_neighbour_lists,
        list_recall,
        prepared_parts,
        prepared_ranker,
    )
    from metricbert_trainer.evaluation.hybrid import with_tfidf
    from metricbert_trainer.evaluation.neighbours import METRIC_INF
    from metricbert_trainer.evaluation.scorers import VectorScorer
    from metricbert_trainer.evaluation.shared_neighbours import neighbour_lists

    @dataclass
    class SyntheticEncoder(VectorScorer):
        """Clustered vectors of MiniLM's width standing in for an encoder's (encoding is not timed)."""

        vectors: dict
        mode: str = METRIC_INF
        name: str = "synthetic encoder"
        distance: Distance = Distance.ANGULAR

        def item_vectors(self, catalog):
            return self.vectors

    wines = pd.read_csv(REPO_ROOT / BENCHMARKS["wines"][0])
    frame = wines.sample(n=items, replace=True, random_state=0)[["title", "description"]]
    frame.insert(0, "id", [f"item-{index}" for index in range(items)])
    catalog = load_catalog(frame)
    hybrid = with_tfidf(SyntheticEncoder(clustered_views(len(catalog), 384)))  # items with a text
    started = time.perf_counter()
    # What evaluate and recommend prepare: the exact hybrid's ranker, or (with candidates) the
    # parts' vectors, which the candidate lists and the ranker then share.
    ready = prepared_parts(hybrid, catalog) if candidates else hybrid.row_ranker(catalog)
    prepared = time.perf_counter() - started
    started = time.perf_counter()
    if not candidates:
        neighbour_lists(ready, len(catalog), neighbours)
        return {"prepared": prepared, "lists": time.perf_counter() - started, "peak_gib": peak_rss_gib()}
    lists = candidate_neighbour_lists(
        hybrid, catalog, neighbours, candidates, backend=backend, prepared=ready
    )
    row = {"prepared": prepared, "lists": time.perf_counter() - started, "peak_gib": peak_rss_gib()}
    if recall_sample:
        sample = np.random.default_rng(1).choice(len(catalog), size=recall_sample, replace=False)
        exact = neighbour_lists(prepared_ranker(hybrid, ready), len(catalog), neighbours, items=sample)
        row["recall"] = list_recall(lists[sample], exact)
        row["peak_with_ranker_gib"] = peak_rss_gib()
    return row


def run_rerank(arguments: argparse.Namespace) -> None:
    from metricbert_trainer.evaluation.shared_neighbours import DEFAULT_NEIGHBOURS

    if not arguments.candidates:
        print_list_timings(rerank_row, arguments.items, DEFAULT_NEIGHBOURS, "hybrid prepared")
        return
    print_candidate_timings(rerank_row, arguments, DEFAULT_NEIGHBOURS, "vectors prepared", arguments.backend)


def drawn_wine_catalog(items: int, path: Path) -> int:
    """Writes a catalog of ``items`` wine sample items drawn with replacement (ids ``item-N``; rows
    without both texts dropped) to ``path``; returns how many it holds."""
    import pandas as pd

    wines = pd.read_csv(REPO_ROOT / BENCHMARKS["wines"][0])
    frame = wines.sample(n=items, replace=True, random_state=0)[["title", "description"]].dropna()
    frame.insert(0, "id", [f"item-{index}" for index in range(len(frame))])
    frame.to_csv(path, index=False)
    return len(frame)


def prepared_recommend_files(items: int, folder: Path) -> tuple[Path, Path]:
    """A catalog of ``items`` wine texts drawn with replacement and an embedding cache of it, as
    ``metricbert recommend --cache`` writes one for the default model, holding clustered synthetic
    vectors under the real fingerprint (encoding two million texts would take hours here)."""
    from transformers import AutoModel, AutoTokenizer

    from metricbert_trainer.base.modeling import DEFAULT_MODEL, resolve_model_name
    from metricbert_trainer.data.catalog import load_catalog
    from metricbert_trainer.evaluation.embedding_cache import (
        embedding_fingerprints,
        text_digests,
        write_embedding_cache,
    )
    from metricbert_trainer.evaluation.neighbours import METRIC_INF, catalog_views
    from metricbert_trainer.evaluation.scorers import recorded_max_length

    catalog_path, cache_path = folder / f"catalog-{items}.csv", folder / f"embeddings-{items}.npz"
    drawn_wine_catalog(items, catalog_path)
    catalog = load_catalog(catalog_path)
    path = resolve_model_name(DEFAULT_MODEL)
    model, tokenizer = AutoModel.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    views = catalog_views(catalog, METRIC_INF)
    vectors = clustered_views(len(catalog), 384)
    write_embedding_cache(
        cache_path,
        # At the length recommend reads the default model at: the max_seq_length its folder records.
        *embedding_fingerprints(model, tokenizer, views, max_length=recorded_max_length(model, tokenizer)),
        {name: vectors[name] for name in views},
        {name: text_digests(texts) for name, texts in views.items()},
        "fp32",
    )
    return catalog_path, cache_path


def timed_command(command: list[str]) -> tuple[subprocess.CompletedProcess, float, float, float]:
    """``command`` run to its end in a process of its own (an error if it fails), with its wall
    time in seconds, the peak resident memory in GiB of its largest process (``/usr/bin/time``'s,
    its last stderr line) and the machine's peak above its start (``machine_peak_added_by``)."""
    started = time.perf_counter()
    finished, added = machine_peak_added_by(["/usr/bin/time", "-f", "%M", *command])
    seconds = time.perf_counter() - started
    return finished, seconds, int(finished.stderr.strip().splitlines()[-1]) / 2**20, added


def cpu_label() -> str:
    """The CPU as /proc/cpuinfo names it (``cpu_name``), with its family and model (one Xeon name
    covers many) and its cores."""
    from metricbert_trainer.training.config import cpuinfo_fields

    fields = cpuinfo_fields()
    return (
        f"{cpu_name()}, family {fields.get('cpu family', '?')} model {fields.get('model', '?')}, "
        f"{os.cpu_count()} cores"
    )


def run_update_cache(arguments: argparse.Namespace) -> None:
    """``metricbert encode --cache`` as a user runs it on a catalog of ``--items`` items that gained
    ``--added`` new ones since its cache was written: only the new items' texts are encoded."""
    import sys

    import pandas as pd

    from metricbert_trainer.base.modeling import DEFAULT_MODEL, resolve_model_name

    OUTPUTS.mkdir(parents=True, exist_ok=True)
    catalog, cache = prepared_recommend_files(arguments.items, OUTPUTS)
    grown = OUTPUTS / f"catalog-{arguments.items}-plus-{arguments.added}.csv"
    frame = pd.read_csv(catalog)
    added = frame.sample(n=arguments.added, random_state=1).reset_index(drop=True)
    added["id"] = [f"added-{index}" for index in range(len(added))]
    added["title"] = [f"{title} (added {index})" for index, title in enumerate(added["title"])]
    added["description"] = [f"{text} Added item {index}." for index, text in enumerate(added["description"])]
    pd.concat([frame, added]).to_csv(grown, index=False)
    # One process as a plain command; several as accelerate launches them, sharing the encoding.
    launcher = (
        [sys.executable, "-m", "metricbert_trainer.cli"]
        if arguments.processes == 1
        else [*cpu_launch(arguments.processes), "-m", "metricbert_trainer.cli"]
    )
    command = [
        *launcher, "encode", "--model", resolve_model_name(DEFAULT_MODEL),
        "--catalog", str(grown), "--cache", str(cache),
    ]  # fmt: skip
    print(f"`{' '.join(command[1:])}`, twice\n")
    print(
        "| processes | items in the cache | items added | call | whole command, s | "
        "largest process's peak RSS GiB | machine's peak above its start GiB |\n"
        "|---:|---:|---:|---|---:|---:|---:|"
    )
    said = []
    for call in ("first (updates the cache)", "second (reads it back)"):
        finished, seconds, peak, added = timed_command(command)
        print(
            f"| {arguments.processes} | {arguments.items:,} | {arguments.added:,} | {call} | {seconds:.1f} | "
            f"{peak:.2f} | {added:.2f} |",
            flush=True,
        )
        said += [line for line in finished.stderr.splitlines() if "embeddings" in line]
    print("\n".join(["", *said, finished.stdout.strip()]))


def run_recommend(arguments: argparse.Namespace) -> None:
    """``metricbert recommend --cache`` as a user runs it, twice in a row on one catalog: the first
    call fits and lists what the cache then keeps, the second reads it all back."""
    import sys

    from metricbert_trainer.base.modeling import DEFAULT_MODEL, resolve_model_name

    if arguments.processes > 1 and not arguments.all:
        raise SystemExit("--processes shares the table of --all among the processes of a launch.")
    OUTPUTS.mkdir(parents=True, exist_ok=True)
    catalog, cache = OUTPUTS / f"catalog-{arguments.items}.csv", OUTPUTS / f"embeddings-{arguments.items}.npz"
    if not (arguments.keep_caches and catalog.exists() and cache.exists()):
        catalog, cache = prepared_recommend_files(arguments.items, OUTPUTS)
        for kept in cache.parent.glob(f"{cache.stem}.*.npz"):
            kept.unlink()
    # One item's neighbours, or every item's written to a table (recommend --all).
    table = OUTPUTS / f"recommendations-{arguments.items}-among-{arguments.all_candidates}.parquet"
    asked = (
        ["--all", "--output", str(table), "--overwrite", "--candidates", str(arguments.all_candidates)]
        if arguments.all
        else ["--item", "item-0"]
    )
    # A plain command, or an accelerate launch whose processes share the table (one thread each).
    launcher = [sys.executable] if arguments.processes == 1 else cpu_launch(arguments.processes)
    command = [
        *launcher, "-m", "metricbert_trainer.cli", "recommend", "--model", resolve_model_name(DEFAULT_MODEL),
        "--catalog", str(catalog), *asked, "--cache", str(cache),
        "--shared-neighbour-candidates", str(arguments.candidates),
    ]  # fmt: skip
    shown = (
        f"metricbert {' '.join(command[3:])}"
        if arguments.processes == 1
        else f"accelerate launch {' '.join(command[3:])}"
    )
    print(f"`{shown}`, the ranking's defaults otherwise ({default_ranking()}); {cpu_label()}\n")
    print(
        "| items | processes | call | s | largest process's peak RSS GiB | machine's peak above its start GiB |\n"
        "|---:|---:|---|---:|---:|---:|"
    )
    calls = ("first (fits, lists, writes the caches)", "second (reads them back)")
    for call in ("first (reads the kept caches back)", calls[1]) if arguments.keep_caches else calls:
        finished, seconds, peak, added = timed_command(command)
        print(
            f"| {arguments.items:,} | {arguments.processes} | {call} | {seconds:.1f} | {peak:.2f} | {added:.2f} |",
            flush=True,
        )
    print("\n" + finished.stdout)
    if arguments.all:
        print(table_summary(table))
    if arguments.all and arguments.recall_sample:
        print(table_recall(command, table, arguments.recall_sample))


def evict_from_page_cache(folder: Path) -> None:
    """The files of ``folder`` dropped from the page cache (``POSIX_FADV_DONTNEED``, which needs no
    privilege for files written and synced), so that the next reader reads them from disk, as after
    a restart."""
    for path in folder.iterdir():
        with open(path, "rb") as handle:
            os.fsync(handle.fileno())
            os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def default_ranking() -> str:
    """The ranking ``recommend`` and ``index`` use by default, in words, from the library's defaults."""
    from metricbert_trainer.evaluation.hybrid import DEFAULT_TFIDF_MODE, DEFAULT_TFIDF_WEIGHT, TFIDF_VIEWS
    from metricbert_trainer.evaluation.shared_neighbours import DEFAULT_NEIGHBOURS, DEFAULT_WEIGHT

    return (
        f"TF-IDF {DEFAULT_TFIDF_WEIGHT:g} over the {TFIDF_VIEWS[DEFAULT_TFIDF_MODE]}, "
        f"{DEFAULT_NEIGHBOURS} shared neighbours at {DEFAULT_WEIGHT:g}"
    )


def run_index(arguments: argparse.Namespace) -> None:
    """``metricbert index`` of ``--items`` items, then ``metricbert recommend --index`` as a user asks
    it, each call a process of its own: the build (TF-IDF fitted and the lists searched anew, unless
    ``--keep-caches``), each of three items' answers (median of ``--calls`` and the largest peak),
    and whether the answer is the one ``recommend --item`` prints with the build's options and its
    kept caches (that call timed too)."""
    import sys

    from metricbert_trainer.base.modeling import DEFAULT_MODEL, resolve_model_name

    OUTPUTS.mkdir(parents=True, exist_ok=True)
    catalog, cache = OUTPUTS / f"catalog-{arguments.items}.csv", OUTPUTS / f"embeddings-{arguments.items}.npz"
    if catalog.is_file() and cache.is_file():
        print(
            f"Reusing {catalog.name} and {cache.name} (python benchmarks/million_items.py recommend wrote them)."
        )
    else:
        catalog, cache = prepared_recommend_files(arguments.items, OUTPUTS)
    if not arguments.keep_caches:
        for kept in cache.parent.glob(f"{cache.stem}.*.npz"):
            kept.unlink()
    index = OUTPUTS / f"index-{arguments.items}"
    options = [
        "--model", resolve_model_name(DEFAULT_MODEL), "--catalog", str(catalog), "--cache", str(cache),
        "--shared-neighbour-candidates", str(arguments.candidates),
    ]  # fmt: skip
    cli = [sys.executable, "-m", "metricbert_trainer.cli"]
    print(
        f"`metricbert index {' '.join(options)} --output {index} --overwrite`, the ranking's defaults ({default_ranking()})\n"
    )
    print("| call | s | peak RSS GiB |\n|---|---:|---:|")
    caches = "kept caches read back" if arguments.keep_caches else "TF-IDF fitted, lists searched"
    _, seconds, peak, _ = timed_command([*cli, "index", *options, "--output", str(index), "--overwrite"])
    size = sum(path.stat().st_size for path in index.iterdir()) / 2**30
    print(f"| index built ({caches}; {size:.2f} GiB on disk) | {seconds:.1f} | {peak:.2f} |", flush=True)
    count = json.loads((index / "index.json").read_text(encoding="utf-8"))[
        "items"
    ]  # rows without a text dropped
    for item in ("item-0", f"item-{count // 2}", f"item-{count - 1}"):
        calls = [
            timed_command([*cli, "recommend", "--index", str(index), "--item", item])
            for _ in range(arguments.calls)
        ]
        seconds = [spent for _, spent, _, _ in calls]
        peak = max(peak for _, _, peak, _ in calls)
        answer = calls[0][0].stdout
        print(
            f"| `recommend --index` {item}, {arguments.calls} calls: median (range) | "
            f"{statistics.median(seconds):.2f} ({min(seconds):.2f}-{max(seconds):.2f}) | {peak:.2f} |",
            flush=True,
        )
        evict_from_page_cache(index)
        _, seconds, peak, _ = timed_command([*cli, "recommend", "--index", str(index), "--item", item])
        print(
            f"| `recommend --index` {item}, the index's files read from disk | {seconds:.2f} | {peak:.2f} |",
            flush=True,
        )
        prepared, seconds, peak, _ = timed_command([*cli, "recommend", *options, "--item", item])
        same = "the same listing" if prepared.stdout == answer else "ANOTHER LISTING"
        print(
            f"| `recommend --item` {item}, caches read back: {same} | {seconds:.1f} | {peak:.2f} |",
            flush=True,
        )
    print("\n" + answer)


def table_summary(table: Path) -> str:
    """The size of a Parquet table ``recommend --all`` wrote, its row groups, and how long pandas
    takes to read it back (median of three)."""
    import pandas as pd
    import pyarrow.parquet as pq

    spent = []
    for _ in range(3):
        started = time.perf_counter()
        pd.read_parquet(table)
        spent.append(time.perf_counter() - started)
    seconds = statistics.median(spent)
    return (
        f"{table.name}: {table.stat().st_size / 2**20:.1f} MiB, {pq.ParquetFile(table).num_row_groups:,} "
        f"row groups, read back by pandas in {seconds:.2f} s (median of 3)."
    )


def run_table_recall(arguments: argparse.Namespace) -> None:
    """``table_recall`` of a table written by ``metricbert recommend --all`` with the options given."""
    import sys

    options = [option for option in arguments.recommend if option != "--"]
    command = [sys.executable, "-m", "metricbert_trainer.cli", "recommend", *options]
    table = Path(options[options.index("--output") + 1])
    print(table_summary(table))
    print(table_recall(command, table, arguments.recall_sample))


def table_recall(command: list[str], table: Path, sample: int) -> str:
    """How much of the exact ranking the table of ``recommend --all`` holds: ``sample`` items drawn
    at random, each ranked against every item by the command's own scorer (its caches read back),
    against their rows of the table: recall@k and the distances' relative error on the pairs both
    list."""
    import pandas as pd

    from metricbert_trainer.cli import build_parser
    from metricbert_trainer.cli.options import load_cli_catalog
    from metricbert_trainer.cli.recommend import command_scorer

    args = build_parser().parse_args(command[3:])
    catalog = load_cli_catalog(args)
    _, _, scorer, _ = command_scorer(args, catalog)
    drawn = np.sort(np.random.default_rng(0).choice(len(catalog), size=sample, replace=False))
    nearest = scorer.nearest_ranker(catalog, args.top_k)
    # A few rows at a time: each holds several [rows, N] arrays while the fusion standardises them.
    found_rows = [nearest(drawn[start : start + 50]) for start in range(0, sample, 50)]
    exact_indices = np.concatenate([rows.indices for rows in found_rows])
    exact_distances = np.concatenate([rows.distances for rows in found_rows])
    ids = np.asarray(catalog.ids, dtype=object)
    listed = pd.read_parquet(table).groupby("id", sort=False)
    found, errors = [], []
    for item, indices, distances in zip(drawn, exact_indices, exact_distances, strict=True):
        rows = listed.get_group(ids[item])
        kept = dict(zip(rows.neighbour_id, rows.distance, strict=True))
        common = [(kept[ids[i]], d) for i, d in zip(indices, distances, strict=True) if ids[i] in kept]
        found.append(len(common) / len(indices))
        errors += [abs(a - b) / abs(b) for a, b in common if b]
    return (
        f"Against the exact ranking of {sample:,} items drawn at random: recall@{args.top_k} "
        f"{np.mean(found):.4f}; the distances' relative error median {np.median(errors):.2%}, "
        f"90th percentile {np.quantile(errors, 0.9):.2%}."
    )


# Run in the training's own process: counts the tokenizer's calls by where they come from, then
# runs the recipe script with the given arguments and prints the counts as the last line. A whole
# catalog's call comes through lengths.catalog_token_ids, or, in commits before 0881158 (the before
# row of docs/scale_out.md, "Tokenized once"), through the guide's own token_keys. A thread also
# samples the process's RSS while the trainer lists the batches' and the teacher's lists.
START_BOOTSTRAP = """
import json, os, runpy, sys, threading, time, traceback
from transformers import PreTrainedTokenizerBase
spent = {"catalog": [0.0, 0], "batches": [0.0, 0]}
# The highest RSS (GiB) sampled while the main thread lists the batches' or the teacher's lists (the
# set-up phases' names, with the leading underscore they had on the trainer before metricbert/setup.py).
lists = dict.fromkeys(("build_neighbourhood_sampler", "list_shared_neighbours"), 0.0)
main_thread = threading.get_ident()
def sample_rss():
    while True:
        frame, names = sys._current_frames().get(main_thread), set()
        while frame is not None:
            names.add(frame.f_code.co_name.lstrip("_"))
            frame = frame.f_back
        with open("/proc/self/statm") as statm:
            rss = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30
        for phase in lists.keys() & names:
            lists[phase] = max(lists[phase], rss)
        time.sleep(0.1)
threading.Thread(target=sample_rss, daemon=True).start()
tokenize = PreTrainedTokenizerBase.__call__
def counted(self, text=None, *arguments, **keywords):
    started = time.perf_counter()
    encoded = tokenize(self, text, *arguments, **keywords)
    names = {frame.name for frame in traceback.extract_stack(limit=8)}
    kind = spent["catalog" if "catalog_token_ids" in names or "token_keys" in names else "batches"]
    kind[0] += time.perf_counter() - started
    kind[1] += len(text) if isinstance(text, list) else 1
    return encoded
PreTrainedTokenizerBase.__call__ = counted
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    import metricbert_trainer
    spent["library"] = metricbert_trainer.__path__[0]
    spent["lists"] = lists
    print("TOKENIZED " + json.dumps(spent), flush=True)
"""


def run_start(arguments: argparse.Namespace) -> None:
    """The catalog recipe to its second step at ``--items`` items, in a process of its own."""
    import json
    import shutil
    import sys

    OUTPUTS.mkdir(parents=True, exist_ok=True)
    catalog = OUTPUTS / f"start-catalog-{arguments.items}.csv"
    items = drawn_wine_catalog(arguments.items, catalog)
    output_dir = OUTPUTS / f"start-{arguments.items}"
    shutil.rmtree(output_dir, ignore_errors=True)
    options = [
        "--catalog", str(catalog), "--output_dir", str(output_dir), "--max_steps", "2",
        "--save_strategy", "no", "--teacher_shared_neighbour_candidates", "200",
        "--neighbourhood_index", "IVF1024,Flat", "--neighbourhood_search_parameters", "nprobe=16",
    ]  # fmt: skip
    command = [
        sys.executable,
        "-c",
        START_BOOTSTRAP,
        str(REPO_ROOT / "recipes" / "train_catalog.py"),
        *options,
    ]
    print(f"`recipes/train_catalog.py {' '.join(options)}`\n")
    started = time.perf_counter()
    finished = subprocess.run(["/usr/bin/time", "-f", "%M", *command], capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if finished.returncode != 0:
        print(finished.stderr[-3000:])
        raise SystemExit(f"the run failed ({finished.returncode})")
    peak = int(finished.stderr.strip().splitlines()[-1]) / 2**20
    line = next(line for line in finished.stdout.splitlines() if line.startswith("TOKENIZED "))
    spent = json.loads(line.removeprefix("TOKENIZED "))
    texts = 2 * items
    lists = spent["lists"]
    print(
        "| items | whole command (s) | peak RSS GiB | tokenizing the catalog (s) | catalog texts tokenized "
        "| tokenizing batches (s) | RSS GiB listing the batches' lists | RSS GiB listing the teacher's "
        "|\n|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    print(
        f"| {items:,} | {seconds:.1f} | {peak:.2f} | {spent['catalog'][0]:.1f} "
        f"| {spent['catalog'][1]:,} ({spent['catalog'][1] / texts:.1f} per text) | {spent['batches'][0]:.1f} "
        f"| {lists['build_neighbourhood_sampler']:.2f} | {lists['list_shared_neighbours']:.2f} |"
    )
    print(f"\nmetricbert_trainer from {spent['library']}")


def print_candidate_timings(
    row, arguments: argparse.Namespace, neighbours: int, prepared: str, *options
) -> None:
    """One table row per catalog size: ``row(items, neighbours, candidates, *options, recall_sample)``
    in a fresh process, lists searched among ``arguments.candidates``, projected to 1M items by ``N``,
    with the recall of the exact lists of ``arguments.recall_sample`` items."""
    searched_by = f" ({options[0]})" if options else ""
    print(
        f"| items | {prepared} (s) | lists searched among {arguments.candidates} candidates{searched_by} (s) "
        f"| peak RSS GiB | lists at 1M items, by N (h) | recall of the exact lists ({arguments.recall_sample} "
        "items) | peak RSS GiB with the exact rows | the listing's peak above what it starts with, GiB |"
        "\n|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    for count in arguments.items:
        result = in_fresh_process(
            row, count, neighbours, arguments.candidates, *options, arguments.recall_sample
        )
        projected = result["lists"] * 1_000_000 / count / 3600
        recall = (
            f"{result['recall']:.4f} | {result['peak_with_ranker_gib']:.2f}"
            if "recall" in result
            else "- | -"
        )
        added = f"{result['listing_added_gib']:.2f}" if "listing_added_gib" in result else "-"
        print(
            f"| {count:,} | {result['prepared']:.1f} | {result['lists']:.1f} | {result['peak_gib']:.2f} "
            f"| {projected:.2f} | {recall} | {added} |",
            flush=True,
        )


def add_candidate_options(command: argparse.ArgumentParser) -> None:
    """``--candidates`` and ``--recall-sample``, for the lists that may be searched among candidates."""
    command.add_argument(
        "--candidates",
        type=int,
        default=0,
        help="Search each list among this many candidates (0: exact lists).",
    )
    command.add_argument(
        "--recall-sample",
        type=int,
        default=500,
        help="With --candidates: compare with the exact lists of this many items drawn at random (0: not).",
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    keys = commands.add_parser("keys", help="Memory and time of the guide cache's keys.")
    keys.add_argument("--texts", type=int, default=200_000)
    keys.add_argument(
        "--tokens", type=int, default=128, help="The longest text; lengths are drawn from half of it up."
    )
    keys.set_defaults(run=run_keys)
    storage = commands.add_parser(
        "storage", help="Ranking and guide verdicts from fp32, fp16 and int8 vectors."
    )
    storage.add_argument("--benchmarks", nargs="+", default=list(BENCHMARKS), choices=list(BENCHMARKS))
    storage.add_argument("--batches", type=int, default=500)
    storage.set_defaults(run=run_storage)
    cache = commands.add_parser("cache", help="The guide cache's time and memory in each storage format.")
    cache.add_argument("--texts", nargs="+", type=int, default=[300_000])
    cache.add_argument("--storages", nargs="+", default=["float32", "float16"])
    cache.set_defaults(run=run_cache)
    node_cache = commands.add_parser(
        "node-cache", help="The guide cache filled by several processes of one machine: their memory."
    )
    node_cache.add_argument("--texts", nargs="+", type=int, default=[250_000])
    node_cache.add_argument("--hidden", type=int, default=1024, help="Floats a vector (BERT-Large's 1024).")
    node_cache.add_argument("--processes", type=int, default=2)
    node_cache.set_defaults(run=run_node_cache)
    ranking = commands.add_parser(
        "ranking", help="The training evaluation's ranking by several processes of one machine: their memory."
    )
    ranking.add_argument("--items", nargs="+", type=int, default=[250_000])
    ranking.add_argument("--seeds", type=int, default=500)
    ranking.add_argument("--hidden", type=int, default=1024, help="Floats a vector (BERT-Large's 1024).")
    ranking.add_argument("--processes", type=int, default=2)
    ranking.set_defaults(run=run_ranking)
    shared = commands.add_parser(
        "shared-encoding", help="Tokenizing and encoding across several processes of one machine: time."
    )
    shared.add_argument("--texts", nargs="+", type=int, default=[200_000])
    shared.add_argument("--hidden", type=int, default=64, help="Floats a vector of the one-layer encoder.")
    shared.add_argument("--processes", nargs="+", type=int, default=[1, 2])
    shared.set_defaults(run=run_shared_encoding)
    search_parser = commands.add_parser("search", help="Exact and FAISS top-100: recall, time, memory.")
    search_parser.add_argument(
        "--items", type=int, default=None, help="A synthetic catalog; default: the wine sample."
    )
    search_parser.add_argument("--queries", type=int, default=2000)
    search_parser.add_argument("--indexes", nargs="+", default=["exact", "IVF256,Flat", "HNSW32"])
    search_parser.add_argument("--nprobe", nargs="+", type=int, default=[8, 32])
    search_parser.add_argument(
        "--ef-search",
        nargs="+",
        type=int,
        default=[128, 512],
        help="HNSW search widths; 0 names none (top_k's own: as many as the candidates).",
    )
    search_parser.set_defaults(run=run_search)
    exact_chunks = commands.add_parser(
        "exact-chunks", help="Exact listing's chunks: the views prepared at every call against once."
    )
    exact_chunks.add_argument("--items", nargs="+", type=int, default=[100_000, 1_000_000])
    exact_chunks.add_argument("--chunks", type=int, default=7)
    exact_chunks.set_defaults(run=run_exact_chunks)
    epoch = commands.add_parser("epoch", help="Step and guide-cache time per item at each max_length.")
    epoch.add_argument("--max-lengths", nargs="+", type=int, default=[64, 128, 256])
    epoch.add_argument("--steps", type=int, default=6)
    epoch.set_defaults(run=run_epoch)
    tfidf = commands.add_parser("tfidf", help="The hybrid ranking's TF-IDF for one query at --items items.")
    tfidf.add_argument("--items", type=int, default=1_000_000)
    tfidf.set_defaults(run=run_tfidf)
    neighbourhoods = commands.add_parser(
        "neighbourhoods", help="The neighbour lists and groups of batch_neighbourhood_size at --items items."
    )
    neighbourhoods.add_argument("--items", nargs="+", type=int, default=[10_000, 20_000, 40_000])
    neighbourhoods.add_argument(
        "--indexes", nargs="+", default=["exact"], help="'exact' and/or faiss.index_factory strings."
    )
    neighbourhoods.add_argument(
        "--search-parameters",
        help="For the FAISS indexes (default: nprobe=16 for an IVF index, which must name its probes; "
        "none for the others, an HNSW index exploring as many items as it lists).",
    )
    neighbourhoods.add_argument(
        "--exact-up-to", type=int, default=200_000, help="Skip the exact lists above this many items."
    )
    neighbourhoods.add_argument(
        "--lists-from",
        choices=["matrix", "cache", "cache-via-matrix"],
        default="matrix",
        help="The item matrix, or the fields held as a run holds the guide's cache, listed as runs do "
        "(cache) or as they did before 2026-11-29 (cache-via-matrix).",
    )
    neighbourhoods.set_defaults(run=run_neighbourhoods)
    shared = commands.add_parser(
        "shared-neighbours",
        help="The teacher's shared-neighbour lists (teacher_shared_neighbours) at --items items.",
    )
    shared.add_argument("--items", nargs="+", type=int, default=[5_000, 10_000, 20_000])
    shared.add_argument(
        "--views",
        choices=["fields", "gathered", "indexed"],
        default="fields",
        help="The start's vectors searched: a tensor per field, or rows of one cache at unit length as "
        "training reads them, beside the index (gathered) or as its storage (indexed).",
    )
    add_candidate_options(shared)
    shared.set_defaults(run=run_shared_neighbours)
    rerank = commands.add_parser(
        "rerank", help="The shared-neighbour re-ranking's lists (evaluate and recommend) at --items items."
    )
    rerank.add_argument("--items", nargs="+", type=int, default=[5_000, 10_000, 20_000])
    add_candidate_options(rerank)
    rerank.add_argument(
        "--backend", choices=["exact", "faiss"], default="faiss", help="How the candidates are found."
    )
    rerank.set_defaults(run=run_rerank)
    drawn_candidates = commands.add_parser(
        "drawn-candidates", help="The teacher's FAISS candidates of a catalog of many copies of each item."
    )
    drawn_candidates.add_argument("--items", type=int, default=300_000)
    drawn_candidates.set_defaults(run=run_drawn_candidates)
    max_length = commands.add_parser(
        "max-length", help="max_length from every text's token length against a sample's."
    )
    max_length.add_argument("--texts", nargs="+", type=int, default=[1_000_000])
    max_length.set_defaults(run=run_max_length)
    lengths = commands.add_parser(
        "lengths", help="Token lengths of a whole catalog's texts: at once against a chunk at a time."
    )
    lengths.add_argument("--texts", nargs="+", type=int, default=[500_000, 2_000_000])
    lengths.add_argument(
        "--at-once-up-to", type=int, default=500_000, help="Tokenize at once only up to this many texts."
    )
    lengths.set_defaults(run=run_lengths)
    recommend = commands.add_parser(
        "recommend",
        help="metricbert recommend --cache twice at --items items: the first call, then one that reads back.",
    )
    recommend.add_argument("--items", type=int, default=20_000)
    recommend.add_argument("--candidates", type=int, default=200, help="--shared-neighbour-candidates.")
    recommend.add_argument(
        "--all",
        action="store_true",
        help="Every item's neighbours (recommend --all --output) instead of item-0's.",
    )
    recommend.add_argument(
        "--all-candidates",
        type=int,
        default=0,
        help="With --all: recommend --candidates (each item's searched among C; 0 compares every pair).",
    )
    recommend.add_argument(
        "--recall-sample",
        type=int,
        default=0,
        help="With --all: compare the table's rows of this many items with the exact ranking.",
    )
    recommend.add_argument(
        "--processes",
        type=int,
        default=1,
        help="With --all: processes of an accelerate launch sharing the table (1: a plain command).",
    )
    recommend.add_argument(
        "--keep-caches",
        action="store_true",
        help="Start from the TF-IDF and lists caches an earlier run kept (both calls then read them back).",
    )
    recommend.set_defaults(run=run_recommend)
    index = commands.add_parser(
        "index", help="metricbert index at --items items, then recommend --index against recommend --item."
    )
    index.add_argument("--items", type=int, default=20_000)
    index.add_argument("--candidates", type=int, default=200, help="--shared-neighbour-candidates.")
    index.add_argument("--calls", type=int, default=5, help="recommend --index calls per item.")
    index.add_argument(
        "--keep-caches", action="store_true", help="Build from the TF-IDF and lists caches a run kept."
    )
    index.set_defaults(run=run_index)
    update = commands.add_parser(
        "update-cache",
        help="metricbert encode on a catalog of --items that gained --added items since its cache.",
    )
    update.add_argument("--items", type=int, default=100_000)
    update.add_argument("--added", type=int, default=1_000)
    update.add_argument(
        "--processes", type=int, default=1, help="Processes of an accelerate launch (1: a plain command)."
    )
    update.set_defaults(run=run_update_cache)
    recall = commands.add_parser(
        "table-recall",
        help="Compare a table recommend --all wrote with the exact ranking of --recall-sample items.",
    )
    recall.add_argument("--recall-sample", type=int, default=500)
    recall.add_argument(
        "recommend", nargs=argparse.REMAINDER, help="The recommend command's own options, after --."
    )
    recall.set_defaults(run=run_table_recall)
    start = commands.add_parser("start", help="The catalog recipe to its second step at --items items.")
    start.add_argument("--items", type=int, default=100_000)
    start.set_defaults(run=run_start)
    arguments = parser.parse_args()
    if arguments.command == "search":
        arguments.parameters = {
            "IVF": [f"nprobe={n}" for n in arguments.nprobe],
            "HNSW": [f"efSearch={n}" if n else "" for n in arguments.ef_search],
        }
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores, load average before: {os.getloadavg()[0]:.2f}")
    arguments.run(arguments)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
