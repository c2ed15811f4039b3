"""A second frozen encoder in the hybrid teacher: batches read its own vectors of their unmasked
texts, its cache file is reused, extended and never mistaken for another encoder's, and the
teacher averages its ranking with the start's."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from conftest import bare_config, save_wide_encoder, tiny_metricbert_trainer

from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.evaluation.encoding import encode_texts
from metricbert_trainer.metricbert.collator import MetricBertCollator
from metricbert_trainer.metricbert.losses.teacher import hybrid_teacher_distillation
from metricbert_trainer.metricbert.teacher_encoder import TeacherEncoder

MAX_LENGTH = 48


@pytest.fixture(scope="module")
def wine_items(wines_csv):
    return load_catalog(wines_csv).dataset.select(range(40))


def _texts(items) -> list[str]:
    return [str(text) for name in ("title", "description") for text in items[name]]


def test_a_masked_batch_reads_the_encoders_own_vectors_of_its_whole_texts(
    wide_encoder_path, tokenizer, wine_items
):
    teacher = TeacherEncoder(wide_encoder_path)
    teacher.encode_catalog_texts(
        tokenizer, _texts(wine_items), max_length=MAX_LENGTH, device=torch.device("cpu")
    )
    collator = MetricBertCollator(
        tokenizer, fields=("title", "description"), max_length=MAX_LENGTH, mlm_probability=0.3, seed=0
    )
    rows = [wine_items[i] for i in (3, 17, 5, 30)]
    batch = collator(rows)
    looked_up = teacher.vectors(batch, ("title", "description"))

    texts = [str(row["title"]) for row in rows] + [str(row["description"]) for row in rows]
    expected = encode_texts(teacher.model, teacher.tokenizer, texts, max_length=MAX_LENGTH)
    assert looked_up.shape == (8, 48)
    np.testing.assert_allclose(looked_up.numpy(), expected, atol=1e-5)


def test_the_cache_is_reused_extended_and_kept_apart_from_another_encoders(
    tmp_path, wide_encoder_path, tokenizer, wine_items, caplog
):
    cache = tmp_path / "teacher.npz"
    texts = _texts(wine_items)
    unique, first_share = len(set(texts)), len(set(texts[:30]))
    cpu = torch.device("cpu")
    with caplog.at_level(logging.INFO, logger="metricbert_trainer.metricbert.teacher_encoder"):
        first = TeacherEncoder(wide_encoder_path)
        first.encode_catalog_texts(tokenizer, texts[:30], max_length=MAX_LENGTH, device=cpu, cache_path=cache)
        second = TeacherEncoder(wide_encoder_path)
        second.encode_catalog_texts(tokenizer, texts, max_length=MAX_LENGTH, device=cpu, cache_path=cache)
        assert (
            f"{unique} texts, {first_share} read from its cache, {unique - first_share} encoded"
            in caplog.text
        )

        other = TeacherEncoder(save_wide_encoder(tmp_path / "other", tokenizer, seed=8))
        caplog.clear()
        other.encode_catalog_texts(tokenizer, texts, max_length=MAX_LENGTH, device=cpu, cache_path=cache)
        assert f"{unique} texts, 0 read from its cache, {unique} encoded" in caplog.text
    # The cache now holds the other encoder's vectors: the first one's are encoded anew, and equal.
    again = TeacherEncoder(wide_encoder_path)
    again.encode_catalog_texts(tokenizer, texts, max_length=MAX_LENGTH, device=cpu, cache_path=cache)
    np.testing.assert_allclose(again._vectors.numpy(), second._vectors.numpy(), atol=1e-6)

    catalog = tmp_path / "catalog.csv"
    catalog.write_text("id,title\n1,a\n")
    with pytest.raises(ValueError, match="not a teacher-encoder cache"):
        again.encode_catalog_texts(tokenizer, texts, max_length=MAX_LENGTH, device=cpu, cache_path=catalog)
    assert catalog.read_text() == "id,title\n1,a\n"


def test_the_teacher_averages_the_second_encoders_standardised_ranking_with_the_starts():
    generator = torch.Generator().manual_seed(0)
    titles, descriptions = torch.randn(2, 10, 16, generator=generator)
    start = torch.randn(20, 16, generator=generator)
    second = torch.randn(20, 24, generator=generator)
    tfidf = torch.rand(10, 10, generator=generator)
    options = dict(tfidf_weight=0.2, temperature=0.5)
    alone = hybrid_teacher_distillation(titles, descriptions, start, tfidf, **options)
    # The same encoder twice is the start alone: an average, not a sum that would sharpen the target.
    twice = hybrid_teacher_distillation(titles, descriptions, start, tfidf, encoder_vectors=start, **options)
    assert float(twice) == pytest.approx(float(alone), abs=1e-6)
    # A student that ranks exactly as the start gains a loss once the second encoder disagrees.
    as_start = hybrid_teacher_distillation(
        start[:10], start[10:], start, tfidf, tfidf_weight=0.0, temperature=0.5
    )
    ensemble = hybrid_teacher_distillation(
        start[:10], start[10:], start, tfidf, tfidf_weight=0.0, temperature=0.5, encoder_vectors=second
    )
    assert float(as_start) == pytest.approx(0.0, abs=1e-6) and float(ensemble) > 1e-3


def test_a_run_with_a_teacher_encoder_trains_on_its_cache(
    tmp_path, tiny_model_path, wide_encoder_path, tokenizer, wine_items
):
    cache = tmp_path / "teacher.npz"
    trainer = tiny_metricbert_trainer(
        tmp_path / "out",
        tiny_model_path,
        tokenizer,
        wine_items,
        teacher_weight=1.0,
        teacher_encoder=wide_encoder_path,
        teacher_encoder_cache=str(cache),
        max_length=MAX_LENGTH,
        disable_tqdm=True,
    )
    trainer.train()
    logged = [entry["teacher_loss"] for entry in trainer.state.log_history if "teacher_loss" in entry]
    assert len(logged) == 2 and all(np.isfinite(logged)) and max(logged) > 0
    assert cache.is_file() and trainer.teacher_parts.encoder._vectors.shape == (
        len(set(_texts(wine_items))),
        48,
    )


def test_a_teacher_encoder_without_the_teacher_term_is_refused(tmp_path):
    with pytest.raises(ValueError, match="set teacher_weight > 0"):
        bare_config(output_dir=str(tmp_path), teacher_encoder="any", teacher_weight=0.0)
    with pytest.raises(ValueError, match="name the teacher_encoder too"):
        bare_config(output_dir=str(tmp_path), teacher_encoder_cache="x.npz", teacher_weight=1.0)
