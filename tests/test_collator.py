import torch

from metricbert_trainer.catalog import load_catalog
from metricbert_trainer.collator import MetricBertCollator, field_inputs


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
