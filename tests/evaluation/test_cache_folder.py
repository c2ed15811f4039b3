"""The user's cache folder (``evaluation.cache_folder``): where it is, how its files are named, and
that trimming it removes the least recently used of the library's own caches and nothing else."""

from __future__ import annotations

import logging
import os
import shutil

import numpy as np
import pandas as pd
import pytest

from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.errors import UsageError
from metricbert_trainer.evaluation.cache_folder import (
    cache_folder,
    folder_cache_path,
    kept_caches,
    used_and_trimmed,
)
from metricbert_trainer.evaluation.embedding_cache import check_cache_path
from metricbert_trainer.evaluation.encoding import encode_catalog
from metricbert_trainer.evaluation.hybrid import with_tfidf
from metricbert_trainer.evaluation.scorers import EncoderScorer, load_encoder
from metricbert_trainer.evaluation.shared_neighbours import SharedNeighbourScorer, lists_cache_beside
from metricbert_trainer.evaluation.tfidf_cache import tfidf_cache_beside


@pytest.fixture(scope="module")
def tiny(tiny_model_path):
    return load_encoder(tiny_model_path, device="cpu")


@pytest.fixture(scope="module")
def catalog(wines_csv):
    return load_catalog(pd.read_csv(wines_csv, dtype=str, nrows=30)[["id", "title", "description"]])


def test_the_folder_is_metricbert_cache_else_xdg_cache_home_else_home(monkeypatch, tmp_path):
    monkeypatch.setenv("METRICBERT_CACHE", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_folder() == tmp_path / "mine"
    monkeypatch.delenv("METRICBERT_CACHE")
    assert cache_folder() == tmp_path / "xdg" / "metricbert"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # the XDG specification ignores it
    assert cache_folder() == tmp_path / "home" / ".cache" / "metricbert"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_folder() == tmp_path / "home" / ".cache" / "metricbert"


def test_each_model_catalog_and_setting_gets_a_file_of_its_own(tiny_model_path, catalog, wines_csv, tmp_path):
    model = shutil.copytree(tiny_model_path, tmp_path / "tiny model")
    settings = {"mode": "metric_inf", "max_length": 32, "precision": "fp32"}

    def named(**changed) -> str:
        return folder_cache_path(tmp_path, model, catalog, **(settings | changed)).name

    first = named()
    assert first.startswith("tiny-model-") and first.endswith(".npz") and named() == first
    other_catalog = load_catalog(pd.read_csv(wines_csv, dtype=str, nrows=31)[["id", "title", "description"]])
    others = [
        named(mode="concat"),
        named(max_length=24),
        named(precision="bf16"),
        folder_cache_path(tmp_path, model, other_catalog, **settings).name,
    ]
    (model / "notes").mkdir()  # a subfolder (a run's checkpoints) is not the model
    assert named() == first
    config = model / "config.json"
    os.utime(config, ns=(config.stat().st_atime_ns, config.stat().st_mtime_ns + 10**9))
    others.append(named())
    assert len({first, *others}) == 6


def test_trimming_removes_the_least_recently_used_of_the_librarys_caches_and_nothing_else(
    tiny, catalog, tmp_path, caplog
):
    """Older embedding caches, a TF-IDF cache and a lists cache of other settings go oldest first
    until the folder fits; the call's own three caches stay, and so do a user's .npz, text file,
    link and a write in flight, byte for byte, whatever the limit."""
    model, tokenizer = tiny
    folder = tmp_path / "cache"
    older = []
    for max_length in (8, 12, 16):
        path = folder / f"older-{max_length}.npz"
        encode_catalog(model, tokenizer, catalog, max_length=max_length, cache_path=path)
        older.append(path)
    # A TF-IDF cache and a lists cache of another setting, beside the oldest embedding cache.
    SharedNeighbourScorer(
        with_tfidf(
            EncoderScorer(model, tokenizer, max_length=8), 0.5, tfidf_cache=tfidf_cache_beside(older[0])
        ),
        3,
        0.25,
        lists_cache=lists_cache_beside(older[0]),
    ).row_ranker(catalog)
    older[1:1] = [tfidf_cache_beside(older[0]), lists_cache_beside(older[0])]
    current = folder / "current.npz"
    SharedNeighbourScorer(
        with_tfidf(
            EncoderScorer(model, tokenizer, max_length=20, cache_path=current),
            0.1,
            tfidf_cache=tfidf_cache_beside(current),
        ),
        3,
        0.25,
        lists_cache=lists_cache_beside(current),
    ).row_ranker(catalog)
    ours = [current, tfidf_cache_beside(current), lists_cache_beside(current)]
    np.savez(folder / "user.npz", weights=np.arange(3))
    (folder / "notes.txt").write_text("kept\n", encoding="utf-8")
    (folder / ".current.npz.x1.partial.npz").write_bytes(b"PK\x03\x04 a write in flight")
    (folder / "link.npz").symlink_to(older[-1])
    foreign = {
        path: path.read_bytes()
        for path in (folder / "user.npz", folder / "notes.txt", folder / ".current.npz.x1.partial.npz")
    }
    assert set(kept_caches(folder)) == {*older, *ours}
    for age, path in enumerate([*older, *ours]):  # least recently used first; ours a day ago
        os.utime(path, (1_000_000 + age, 1_000_000 + age))
    sizes = {path: path.stat().st_size for path in [*older, *ours]}
    limit = sum(sizes.values()) - sizes[older[0]] - sizes[older[1]]
    with caplog.at_level(logging.INFO, logger="metricbert_trainer.evaluation.cache_folder"):
        assert used_and_trimmed(current, limit) == older[:2]
        assert not any(record.levelno >= logging.WARNING for record in caplog.records)
    assert all(path.is_file() for path in [*older[2:], *ours])
    assert all(path.stat().st_mtime > 1_000_000 + len(sizes) for path in ours)  # marked as used now
    with caplog.at_level(logging.WARNING, logger="metricbert_trainer.evaluation.cache_folder"):
        assert used_and_trimmed(current, 1) == older[2:]
    assert "they are kept" in caplog.text
    assert sorted(kept_caches(folder)) == sorted(ours)
    assert {path: path.read_bytes() for path in foreign} == foreign
    assert (folder / "link.npz").is_symlink()


def test_a_damaged_archive_is_not_taken_for_a_cache(tmp_path):
    """An .npz cut short raised ``BadZipFile`` out of the check of every cache (a traceback for
    ``--cache broken.npz``); it is a file that is not a cache: left alone, never replaced."""
    broken = tmp_path / "broken.npz"
    broken.write_bytes(b"PK\x03\x04 not a whole zip archive")
    assert kept_caches(tmp_path) == []
    with pytest.raises(UsageError, match="is not an embedding cache"):
        check_cache_path(broken)
