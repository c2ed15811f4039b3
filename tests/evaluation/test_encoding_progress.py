"""An encoding killed before it wrote its cache: the next call reads back the chunks it kept and
encodes the rest (``evaluation.encoding_progress``)."""

from __future__ import annotations

import logging
import subprocess
import sys

import numpy as np
import pandas as pd
from transformers import AutoModel, AutoTokenizer

from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.evaluation import encoding_progress
from metricbert_trainer.evaluation.encoding import encode_views
from metricbert_trainer.evaluation.encoding_progress import progress_folder

# A process that encodes the first 120 wines' two fields into a cache 16 distinct texts a chunk,
# and kills itself (SIGKILL: nothing runs after it) once it has kept its third chunk.
KILLED_ENCODING = """
import os, signal, sys
import pandas as pd
from transformers import AutoModel, AutoTokenizer
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.evaluation import encoding_progress
from metricbert_trainer.evaluation.encoding import encode_views

model_path, wines, cache = sys.argv[1:]
encoding_progress.CHUNK_TEXTS = 16
keep = encoding_progress.EncodingProgress._keep
def keep_then_die(self, *arguments):
    keep(self, *arguments)
    if len(list(self.folder.glob("chunk-*.npz"))) == 3:
        os.kill(os.getpid(), signal.SIGKILL)
encoding_progress.EncodingProgress._keep = keep_then_die
catalog = load_catalog(pd.read_csv(wines, dtype=str, nrows=120)[["id", "title", "description"]])
views = {field: catalog.texts(field) for field in catalog.fields}
encode_views(AutoModel.from_pretrained(model_path), AutoTokenizer.from_pretrained(model_path), views, cache_path=cache)
"""


def tiny_encoder_and_views(model_path: str, wines_csv) -> tuple:
    """The tiny model, its tokenizer and the two fields of the first 120 wines, as the killed
    process encodes them."""
    catalog = load_catalog(pd.read_csv(wines_csv, dtype=str, nrows=120)[["id", "title", "description"]])
    views = {field: catalog.texts(field) for field in catalog.fields}
    return AutoModel.from_pretrained(model_path), AutoTokenizer.from_pretrained(model_path), views


def test_a_killed_encoding_continues_where_it_stopped(
    tiny_model_path, wines_csv, tmp_path, caplog, monkeypatch
):
    cache = tmp_path / "embeddings.npz"
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_ENCODING, tiny_model_path, str(wines_csv), str(cache)],
        capture_output=True,
    )
    assert killed.returncode == -9, killed.stderr.decode()
    assert not cache.exists()
    assert len(list(progress_folder(cache).glob("chunk-*.npz"))) == 3

    monkeypatch.setattr(encoding_progress, "CHUNK_TEXTS", 16)
    model, tokenizer, views = tiny_encoder_and_views(tiny_model_path, wines_csv)
    with caplog.at_level(logging.INFO, logger="metricbert_trainer.evaluation"):
        resumed = encode_views(model, tokenizer, views, cache_path=cache)
    distinct_titles = len(set(views["title"]))
    assert (
        f"Resuming an encoding stopped before: 48 of {distinct_titles} distinct texts read back"
        in caplog.text
    )
    assert cache.is_file() and not progress_folder(cache).exists()
    alone = encode_views(model, tokenizer, views)
    for field in views:
        # Read back or encoded now, each in batches of its own: equal to the last bits of rounding.
        np.testing.assert_allclose(resumed[field], alone[field], rtol=0, atol=1e-6)


def test_chunks_kept_for_another_model_or_length_are_not_read_back(
    tiny_model_path, wines_csv, tmp_path, caplog
):
    cache = tmp_path / "embeddings.npz"
    command = [sys.executable, "-c", KILLED_ENCODING, tiny_model_path, str(wines_csv), str(cache)]
    assert subprocess.run(command, capture_output=True).returncode == -9
    model, tokenizer, views = tiny_encoder_and_views(tiny_model_path, wines_csv)
    with caplog.at_level(logging.INFO, logger="metricbert_trainer.evaluation"):
        shorter = encode_views(model, tokenizer, views, cache_path=cache, max_length=32)
    assert "Resuming" not in caplog.text
    alone = encode_views(model, tokenizer, views, max_length=32)
    for field in views:
        np.testing.assert_allclose(shorter[field], alone[field], rtol=0, atol=1e-6)
    assert not progress_folder(cache).exists()
