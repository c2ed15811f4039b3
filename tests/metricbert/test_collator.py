import pytest
import torch

from metricbert_trainer.base.collator import field_inputs, unmasked
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.metricbert.collator import MetricBertCollator


def _wine_items(wines_csv, count):
    return list(load_catalog(wines_csv).dataset.select(range(count)))


def test_masking_rate_specials_and_padding(tokenizer, wines_csv):
    torch.manual_seed(0)
    collator = MetricBertCollator(tokenizer, max_length=64)
    batch = collator(_wine_items(wines_csv, 256))
    for name in ("title", "description"):
        inputs = field_inputs(batch, name)
        labels, attention = inputs["labels"], inputs["attention_mask"].bool()
        masked = labels != -100
        assert not bool((masked & ~attention).any()), "padding was masked"
        assert not bool(torch.isin(labels[masked], torch.tensor(tokenizer.all_special_ids)).any()), (
            "a special token was masked"
        )
        # Only real, non-special tokens can be masked; their share should be close to 15%.
        original = torch.where(masked, labels, inputs["input_ids"])
        maskable = attention & ~torch.isin(original, torch.tensor(tokenizer.all_special_ids))
        rate = float(masked.sum() / maskable.sum())
        assert 0.13 < rate < 0.17, rate
        # 80% of masked positions become [MASK], the rest random or unchanged.
        mask_share = float((inputs["input_ids"][masked] == tokenizer.mask_token_id).float().mean())
        assert 0.74 < mask_share < 0.86, mask_share


def test_each_field_padded_to_its_own_longest_and_truncated(tokenizer):
    collator = MetricBertCollator(tokenizer, max_length=12, mlm_probability=0.0)
    items = [
        {"title": "short", "description": "a much longer description " * 10},
        {"title": "a slightly longer title", "description": "brief"},
    ]
    batch = collator(items)
    title_length = max(len(tokenizer(item["title"])["input_ids"]) for item in items)
    assert batch["title_input_ids"].shape == (2, title_length)
    assert batch["description_input_ids"].shape == (2, 12)
    assert "title_labels" not in batch, "no labels without masking"


def test_row_order_matches_items(tokenizer):
    collator = MetricBertCollator(tokenizer, mlm_probability=0.0)
    items = [{"title": f"title {i}", "description": f"description {i}"} for i in range(5)]
    batch = collator(items)
    for i, item in enumerate(items):
        ids = batch["title_input_ids"][i][batch["title_attention_mask"][i].bool()]
        assert tokenizer.decode(ids, skip_special_tokens=True) == item["title"]


def test_unknown_tokens_from_the_text_are_never_masked(tokenizer):
    # U+0378 is an unassigned code point: the tokenizer turns it into [UNK], a special token.
    items = [{"title": f"Wine \u0378 number {index}", "description": "\u0378 " * 20} for index in range(16)]
    batch = MetricBertCollator(tokenizer, max_length=64, mlm_probability=0.9, seed=1)(items)
    for name in ("title", "description"):
        unknown = unmasked(field_inputs(batch, name))["input_ids"] == tokenizer.unk_token_id
        assert unknown.sum() >= 16
        assert (batch[f"{name}_labels"][unknown] == -100).all()


def test_masks_depend_on_the_batch_and_seed_not_on_earlier_batches(tokenizer, wines_csv):
    # A resumed run must mask a batch as the uninterrupted run did, whatever was drawn before.
    items = _wine_items(wines_csv, 8)
    collator = MetricBertCollator(tokenizer, max_length=64, mlm_probability=0.15, seed=5)
    first = collator(items)
    collator(_wine_items(wines_csv, 16)[8:])
    torch.manual_seed(123)
    again = collator(items)
    assert all(torch.equal(first[key], again[key]) for key in first)
    reseeded = MetricBertCollator(tokenizer, max_length=64, mlm_probability=0.15, seed=6)(items)
    reordered = collator(items[::-1])
    assert not torch.equal(first["description_labels"], reseeded["description_labels"])
    assert not torch.equal(first["description_labels"], reordered["description_labels"].flip(0))


def test_padding_multiple_that_does_not_divide_max_length_is_refused_up_front(tokenizer):
    with pytest.raises(ValueError, match="max_length=12 is not a multiple of pad_to_multiple_of=8"):
        MetricBertCollator(tokenizer, max_length=12, pad_to_multiple_of=8)
    batch = MetricBertCollator(tokenizer, max_length=16, pad_to_multiple_of=8)(
        [{"title": "a", "description": "b c"}]
    )
    assert batch["title_input_ids"].shape[1] % 8 == 0
