"""RecoBERT's joint inputs and its pair collator, on the real MiniLM tokenizer and real wines."""

import pytest
import torch

from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.recobert import RecoBertCollator, encode_pairs

TITLE = "Rainstorm 2013 Pinot Gris (Willamette Valley)"
DESCRIPTION = "Tart and snappy, lime flesh and rind."


def _segment_text(tokenizer, batch, row, mask_name):
    return tokenizer.decode(batch["input_ids"][row][batch[mask_name][row]])


def test_segments_hold_exactly_each_fields_tokens(tokenizer):
    batch = encode_pairs(tokenizer, [TITLE, "Short"], [DESCRIPTION, "Brief."], max_length=64)
    ids = batch["input_ids"]
    assert ids[0, 0] == tokenizer.cls_token_id
    title_ids = tokenizer(TITLE, add_special_tokens=False)["input_ids"]
    description_ids = tokenizer(DESCRIPTION, add_special_tokens=False)["input_ids"]
    # [CLS] title [SEP] description [SEP]: the masks cover the two runs of content tokens only.
    assert ids[0][batch["title_mask"][0]].tolist() == title_ids
    assert ids[0][batch["description_mask"][0]].tolist() == description_ids
    assert batch["title_mask"][0].nonzero().flatten().tolist() == list(range(1, 1 + len(title_ids)))
    first_description = 2 + len(title_ids)
    assert batch["description_mask"][0].nonzero().flatten().tolist() == list(
        range(first_description, first_description + len(description_ids))
    )
    assert batch["token_type_ids"][0][batch["description_mask"][0]].eq(1).all()
    # The shorter second row is padded; padding and specials are in neither segment.
    padding = batch["attention_mask"][1] == 0
    assert padding.any() and not (batch["title_mask"][1] | batch["description_mask"][1])[padding].any()
    specials = torch.isin(ids, torch.tensor(tokenizer.all_special_ids))
    assert not (specials & (batch["title_mask"] | batch["description_mask"])).any()
    assert (batch["special_tokens_mask"] == (specials | (batch["attention_mask"] == 0))).all()


def test_truncation_keeps_a_short_title_whole(tokenizer):
    long_description = "ripe dark fruit with a long finish " * 40
    batch = encode_pairs(tokenizer, [TITLE], [long_description], max_length=48)
    assert batch["input_ids"].shape == (1, 48)
    assert _segment_text(tokenizer, batch, 0, "title_mask") == tokenizer.decode(
        tokenizer(TITLE, add_special_tokens=False)["input_ids"]
    )
    assert int(batch["description_mask"].sum()) == 48 - 3 - int(batch["title_mask"].sum())


def test_slow_tokenizers_are_refused_with_a_reason(tokenizer):
    class Slow:
        is_fast = False

    with pytest.raises(ValueError, match="fast"):
        encode_pairs(Slow(), ["a"], ["b"], max_length=16)


@pytest.fixture(scope="module")
def wines(wines_csv):
    return list(load_catalog(wines_csv).dataset.select(range(256)))


def test_labels_say_whether_the_description_is_the_items_own(tokenizer, wines):
    torch.manual_seed(0)
    collator = RecoBertCollator(tokenizer, max_length=128, mlm_probability=0.0)
    batch = collator(wines)
    # Each description's first 20 tokens identify the item it came from.
    by_description = {
        tokenizer.decode(tokenizer(item["description"], add_special_tokens=False)["input_ids"][:20]): item
        for item in wines
    }
    for row, label in enumerate(batch["tdm_labels"].tolist()):
        title = tokenizer.decode(batch["input_ids"][row][batch["title_mask"][row]])
        description_ids = batch["input_ids"][row][batch["description_mask"][row]]
        paired = by_description[tokenizer.decode(description_ids[:20])]
        expected_title = tokenizer.decode(tokenizer(paired["title"], add_special_tokens=False)["input_ids"])
        assert (title == expected_title) == (label == 1.0), (row, title, paired["title"])
    # Half the pairs mismatched, give or take sampling noise (256 Bernoulli draws: sd 3.1%).
    assert 0.4 < float(batch["tdm_labels"].mean()) < 0.6
    assert "labels" not in batch, "no MLM labels without masking"


def test_negative_probability_extremes_and_duplicate_descriptions(tokenizer, wines):
    torch.manual_seed(1)
    assert (
        RecoBertCollator(tokenizer, max_length=64, negative_probability=0.0)(wines[:32])["tdm_labels"]
        .eq(1)
        .all()
    )
    assert (
        RecoBertCollator(tokenizer, max_length=64, negative_probability=1.0)(wines[:32])["tdm_labels"]
        .eq(0)
        .all()
    )
    # Two items with the same description text: drawing the other's is still a match.
    twins = [
        {"title": "A 2015 Red", "description": "Same words."},
        {"title": "B 2016 Red", "description": "Same words."},
    ]
    batch = RecoBertCollator(tokenizer, max_length=64, negative_probability=1.0)(twins)
    assert batch["tdm_labels"].eq(1).all()
    # A batch of one has no other item to draw from: its only pair is the item's own.
    assert RecoBertCollator(tokenizer, max_length=64, negative_probability=1.0)(wines[:1])[
        "tdm_labels"
    ].tolist() == [1.0]


def test_mlm_masks_only_field_tokens(tokenizer, wines):
    torch.manual_seed(0)
    batch = RecoBertCollator(tokenizer, max_length=128, mlm_probability=0.15)(wines)
    masked = batch["labels"] != -100
    fields = batch["title_mask"] | batch["description_mask"]
    assert not (masked & ~fields).any(), "a special or padding position was masked"
    rate = float(masked.sum() / fields.sum())
    assert 0.13 < rate < 0.17, rate
    # The segment masks still cover the masked positions: pooling sees the masked inputs.
    assert (batch["title_mask"] | batch["description_mask"])[masked].all()


def test_padding_multiple_that_does_not_divide_max_length_is_refused_up_front(tokenizer, wines):
    # The check every collator inherits from CatalogCollator: transformers would refuse it only at
    # the first batch, after the model has loaded.
    with pytest.raises(ValueError, match="max_length=100 is not a multiple of pad_to_multiple_of=8"):
        RecoBertCollator(tokenizer, max_length=100, pad_to_multiple_of=8)
    batch = RecoBertCollator(tokenizer, max_length=64, pad_to_multiple_of=8)(wines[:4])
    assert batch["input_ids"].shape[1] % 8 == 0
