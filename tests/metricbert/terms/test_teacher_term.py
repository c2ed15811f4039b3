"""The teacher term: the hybrid teacher's pull, computed from the batch's unmasked words, weighted."""

import pytest
import torch
from conftest import bare_config

from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.data.token_rows import TokenRows
from metricbert_trainer.metricbert.collator import MetricBertCollator
from metricbert_trainer.metricbert.terms import StepVectors, TeacherParts, TeacherTerm
from metricbert_trainer.metricbert.token_tfidf import JOINED, TokenTfidf, joined_counts

FIELDS = ("title", "description")
MAX_LENGTH = 64


@pytest.fixture(scope="module")
def items(wines_csv):
    return list(load_catalog(wines_csv).dataset.select(range(12)))


@pytest.fixture(scope="module")
def counts(tokenizer, items):
    rows = {
        name: TokenRows.tokenize(tokenizer, [item[name] for item in items], MAX_LENGTH) for name in FIELDS
    }
    return {name: field_rows.counts(len(tokenizer)) for name, field_rows in rows.items()}


def _step(tokenizer, items, seed: int) -> StepVectors:
    """The batch masked by ``seed``'s draw, with fixed student and guide vectors."""
    batch = MetricBertCollator(
        tokenizer, fields=FIELDS, max_length=MAX_LENGTH, mlm_probability=0.3, seed=seed
    )(items)
    generator = torch.Generator().manual_seed(0)
    titles, descriptions = torch.randn(2, len(items), 16, generator=generator)
    guide = torch.randn(2 * len(items), 16, generator=generator)
    return StepVectors(batch, {}, titles, descriptions, FIELDS, guide_vectors=guide)


def test_the_share_is_weighted_and_reads_the_words_not_the_masks(tokenizer, items, counts):
    parts = TeacherParts(tfidf=TokenTfidf.fit(counts, tokenizer.all_special_ids))
    term = TeacherTerm.from_config(bare_config(teacher_weight=0.5, teacher_tfidf_weight=0.3), parts)
    first, second = _step(tokenizer, items, seed=1), _step(tokenizer, items, seed=2)
    assert not torch.equal(first.inputs["title_input_ids"], second.inputs["title_input_ids"])
    value = term(first)
    torch.testing.assert_close(value.loss, 0.5 * term.distillation(second))
    assert set(value.statistics) == {"teacher_loss"}
    assert float(value.statistics["teacher_loss"]) == pytest.approx(float(term.distillation(first)))


def test_the_words_count_by_the_tfidf_weight_each_field_or_joined(tokenizer, items, counts):
    step = _step(tokenizer, items, seed=1)
    each_field = TeacherParts(tfidf=TokenTfidf.fit(counts, tokenizer.all_special_ids))
    joined = TeacherParts(
        tfidf=TokenTfidf.fit({JOINED: joined_counts(list(counts.values()))}, tokenizer.all_special_ids)
    )

    def loss(parts, tfidf_weight):
        args = bare_config(teacher_weight=1.0, teacher_tfidf_weight=tfidf_weight)
        return float(TeacherTerm.from_config(args, parts).distillation(step))

    assert loss(each_field, 0.0) == pytest.approx(loss(joined, 0.0))  # the start's ranking alone
    assert loss(each_field, 0.4) != pytest.approx(loss(joined, 0.4), abs=1e-5)
    assert loss(each_field, 0.4) != pytest.approx(loss(each_field, 0.0), abs=1e-5)
