"""The hybrid teacher: word-piece TF-IDF as scikit-learn computes it, a listwise term that is zero
when the student already ranks as the teacher and pulls it towards the teacher otherwise, and a
training run that logs it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import bare_config
from sklearn.feature_extraction.text import TfidfVectorizer

from metricbert_trainer.base.modeling import load_masked_lm
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.data.token_rows import TokenRows
from metricbert_trainer.metricbert.losses.teacher import hybrid_teacher_distillation, item_distances
from metricbert_trainer.metricbert.setup import TrainingSetup
from metricbert_trainer.metricbert.token_tfidf import JOINED, TokenTfidf, joined_counts
from metricbert_trainer.metricbert.trainer import MetricBertTrainer


@pytest.fixture(scope="module")
def wine_items(wines_csv):
    return load_catalog(wines_csv).dataset.select(range(48))


def test_word_piece_tfidf_is_scikit_learns_over_the_token_ids(tokenizer, wine_items):
    texts = [str(text) for text in wine_items["description"]]
    counts = TokenRows.tokenize(tokenizer, texts, max_length=64).counts(len(tokenizer))
    tfidf = TokenTfidf.fit({"description": counts}, tokenizer.all_special_ids)
    encoded = tokenizer(texts[:8], truncation=True, max_length=64, padding=True, return_tensors="pt")
    ours = tfidf.vectors("description", encoded["input_ids"], encoded["attention_mask"]).numpy()

    special = set(tokenizer.all_special_ids)
    documents = [
        " ".join(str(i) for i in ids if i not in special)
        for ids in tokenizer(texts, truncation=True, max_length=64)["input_ids"]
    ]
    reference = TfidfVectorizer(token_pattern=r"\S+", lowercase=False).fit(documents)
    expected = reference.transform(documents[:8]).toarray()
    columns = [int(token) for token in reference.get_feature_names_out()]
    np.testing.assert_allclose(ours[:, columns], expected, atol=1e-6)
    # Nothing outside the catalog's word pieces, and no special token, carries weight.
    assert np.abs(np.delete(ours, columns, axis=1)).max() == 0


def test_a_catalogs_sparse_rows_are_the_vectors_a_batch_of_the_same_texts_gets(tokenizer, wine_items):
    texts = [str(text) for text in wine_items["description"]]
    tfidf = TokenTfidf.fit(
        {"description": TokenRows.tokenize(tokenizer, texts, 48).counts(len(tokenizer))},
        tokenizer.all_special_ids,
    )
    matrix = tfidf.catalog_vectors(
        "description", TokenRows.tokenize(tokenizer, texts[:12], 48).counts(len(tokenizer))
    )
    batch = tokenizer(texts[:12], truncation=True, max_length=48, padding=True, return_tensors="pt")
    expected = tfidf.vectors("description", batch["input_ids"], batch["attention_mask"])
    np.testing.assert_allclose(matrix.toarray(), expected.numpy(), atol=1e-6)


def test_joined_fields_are_one_bag_of_word_pieces_per_item_as_scikit_learn_counts_it(tokenizer, wine_items):
    titles = [str(text) for text in wine_items["title"]]
    descriptions = [str(text) for text in wine_items["description"]]
    counts = [
        TokenRows.tokenize(tokenizer, texts, 48).counts(len(tokenizer)) for texts in (titles, descriptions)
    ]
    tfidf = TokenTfidf.fit({JOINED: joined_counts(counts)}, tokenizer.all_special_ids)
    encoded = [
        tokenizer(texts[:8], truncation=True, max_length=48, padding=True, return_tensors="pt")
        for texts in (titles, descriptions)
    ]
    batch = tfidf.vectors(
        JOINED,
        torch.cat([field["input_ids"] for field in encoded], dim=1),
        torch.cat([field["attention_mask"] for field in encoded], dim=1),
    ).numpy()

    special = set(tokenizer.all_special_ids)
    documents = [
        " ".join(str(i) for ids in item for i in ids if i not in special)
        for item in zip(
            tokenizer(titles, truncation=True, max_length=48)["input_ids"],
            tokenizer(descriptions, truncation=True, max_length=48)["input_ids"],
            strict=True,
        )
    ]
    reference = TfidfVectorizer(token_pattern=r"\S+", lowercase=False).fit(documents)
    columns = [int(token) for token in reference.get_feature_names_out()]
    np.testing.assert_allclose(batch[:, columns], reference.transform(documents[:8]).toarray(), atol=1e-6)
    # A word piece of one item's title meets the same word piece of another's description.
    catalog = tfidf.catalog_vectors(JOINED, joined_counts([field[:8] for field in counts]))
    np.testing.assert_allclose(catalog.toarray(), batch, atol=1e-6)


def _batch(items: int = 12, hidden: int = 16, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    return (
        torch.randn(items, hidden, generator=generator),
        torch.randn(items, hidden, generator=generator),
        torch.rand(items, items, generator=generator),
    )


def test_the_term_is_zero_when_the_student_ranks_as_the_teacher():
    titles, descriptions, tfidf = _batch()
    guide = torch.cat([titles, descriptions])
    loss = hybrid_teacher_distillation(titles, descriptions, guide, tfidf, tfidf_weight=0.0, temperature=0.5)
    assert float(loss) == pytest.approx(0.0, abs=1e-6)
    fused = hybrid_teacher_distillation(titles, descriptions, guide, tfidf, tfidf_weight=0.2, temperature=0.5)
    assert float(fused) > 1e-4


def test_the_term_pulls_the_students_ranking_towards_the_teachers():
    titles, descriptions, tfidf = _batch(seed=1)
    guide = torch.cat(_batch(seed=2)[:2])
    student = [titles.clone().requires_grad_(True), descriptions.clone().requires_grad_(True)]
    rows = torch.arange(len(titles))

    def agreement() -> float:
        with torch.no_grad():
            ours = item_distances(*student, rows, "angular")
            theirs = item_distances(guide[:12], guide[12:], rows, "angular")
        off_diagonal = ~torch.eye(len(rows), dtype=torch.bool)
        return float(np.corrcoef(ours[off_diagonal].numpy(), theirs[off_diagonal].numpy())[0, 1])

    before = agreement()
    optimizer = torch.optim.Adam(student, lr=0.05)
    for _ in range(60):
        optimizer.zero_grad()
        hybrid_teacher_distillation(*student, guide, tfidf, tfidf_weight=0.0, temperature=0.5).backward()
        optimizer.step()
    assert agreement() > before + 0.3, (before, agreement())


def test_a_run_with_the_teacher_logs_its_term_with_no_other_guide_user(
    tmp_path, tiny_model_path, tokenizer, wine_items
):
    args = bare_config(
        output_dir=str(tmp_path / "out"),
        max_steps=3,
        logging_steps=1,
        per_device_train_batch_size=16,
        max_length=32,
        report_to="none",
        disable_tqdm=True,
        use_cpu=True,
        save_strategy="no",
        false_negative_filter=False,
        guide_diagnostics=False,
        distill_weight=0.0,
        teacher_weight=1.0,
    )
    trainer = MetricBertTrainer(
        load_masked_lm(tiny_model_path), args, train_dataset=wine_items, processing_class=tokenizer
    )
    trainer.train()
    logged = [entry["teacher_loss"] for entry in trainer.state.log_history if "teacher_loss" in entry]
    assert len(logged) >= 3 and all(np.isfinite(logged)) and max(logged) > 0
    assert trainer.teacher_parts.tfidf is not None and set(trainer.teacher_parts.tfidf.idf) == {
        "title",
        "description",
    }


def test_joined_fields_on_a_catalog_of_three_fields_fall_back_to_each_slot_and_say_so(
    tmp_path, tiny_model_path, tokenizer, wine_items, caplog
):
    # A batch slot of such a catalog holds any of its fields: no item's pair to join.
    items = wine_items.add_column("tags", [" ".join(text.split()[:6]) for text in wine_items["description"]])
    args = bare_config(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=16,
        max_length=32,
        use_cpu=True,
        report_to="none",
        teacher_weight=1.0,
        teacher_tfidf_mode="concat",
    )
    trainer = MetricBertTrainer(
        load_masked_lm(tiny_model_path),
        args,
        train_dataset=items,
        processing_class=tokenizer,
        fields=("title", "description", "tags"),
    )
    with caplog.at_level("WARNING"):
        tfidf = TrainingSetup(trainer).fit_token_tfidf()
    assert set(tfidf.idf) == set(trainer.batch_fields)
    assert "teacher_tfidf_mode concat joins an item's title and description" in caplog.text
