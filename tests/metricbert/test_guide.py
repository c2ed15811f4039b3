import contextlib
import math

import pytest
import torch

from metricbert_trainer.base.modeling import load_masked_lm
from metricbert_trainer.base.pooling import mean_pool
from metricbert_trainer.data import lengths as lengths_module
from metricbert_trainer.data.token_rows import TokenRows
from metricbert_trainer.metricbert.collator import MetricBertCollator
from metricbert_trainer.metricbert.guide import CacheStorage, StartingModelGuide


def _unit(degrees):
    return [math.cos(math.radians(degrees)), math.sin(math.radians(degrees))]


def test_closer_than_positive_and_negative_closer_rate_on_hand_built_vectors():
    # Titles at 0 and 10 degrees, descriptions at 40 and 45: each title's sibling title is closer than its description.
    vectors = torch.tensor([_unit(0), _unit(10), _unit(40), _unit(45)])
    anchor, positive = torch.tensor([0, 1]), torch.tensor([2, 3])
    closer = StartingModelGuide.closer_than_positive(vectors, anchor, positive)
    assert closer.tolist() == [[True, True, False, False], [True, True, True, False]]
    assert StartingModelGuide.negative_closer_rate(vectors, anchor, positive, torch.tensor([1, 0])) == 1.0
    assert StartingModelGuide.negative_closer_rate(vectors, anchor, positive, torch.tensor([3, 2])) == 0.5


def test_a_filter_margin_also_excludes_candidates_just_beyond_the_positive():
    # Anchor at 0 degrees, positive at 36 (angular distance 0.2); candidates at 30, 40, 54 and 90 degrees.
    vectors = torch.tensor([_unit(0), _unit(36), _unit(30), _unit(40), _unit(54), _unit(90)])
    anchor, positive = torch.tensor([0]), torch.tensor([1])
    plain = StartingModelGuide.closer_than_positive(vectors, anchor, positive)
    assert plain[0, 2:].tolist() == [True, False, False, False]
    # A margin of 0.1 (18 degrees) reaches out to 54 degrees, exclusive.
    widened = StartingModelGuide.closer_than_positive(vectors, anchor, positive, margin=0.1)
    assert widened[0, 2:].tolist() == [True, True, False, False]
    widened = StartingModelGuide.closer_than_positive(vectors, anchor, positive, margin=0.11)
    assert widened[0, 2:].tolist() == [True, True, True, False]


def test_guide_embeds_the_unmasked_text_and_stays_frozen(tiny_model_path, tokenizer):
    model = load_masked_lm(tiny_model_path)
    guide = StartingModelGuide(model)
    items = [
        {"title": "Pinot Gris", "description": "Tart and snappy."},
        {"title": "Etna Bianco", "description": "Broom."},
    ]
    torch.manual_seed(0)
    batch = MetricBertCollator(tokenizer, mlm_probability=0.5)(items)
    with torch.no_grad():
        model.base_model.embeddings.word_embeddings.weight.add_(1.0)  # training moves the live model
    clean = tokenizer([item["title"] for item in items], padding=True, return_tensors="pt")
    original = load_masked_lm(tiny_model_path).base_model.eval()
    with torch.no_grad():
        expected = mean_pool(original(**clean).last_hidden_state, clean["attention_mask"])
    torch.testing.assert_close(guide.embed(batch, ("title", "description"))[:2], expected)
    assert not any(parameter.requires_grad for parameter in guide.encoder.parameters())


def test_a_loss_holding_the_guide_never_mines_what_the_guide_ranks_above_the_positive(tiny_model_path):
    """GISTEmbed's rule, applied by the loss that holds the guide: on the hand-built vectors above,
    the model in training would mine each title's sibling title, which the guide calls closer."""
    from metricbert_trainer.metricbert.losses import TripletLoss

    guide_vectors = torch.tensor([_unit(0), _unit(10), _unit(40), _unit(45)])
    titles, descriptions = guide_vectors[:2].clone(), guide_vectors[2:].clone()
    unguided = TripletLoss(anchors="title")(titles, descriptions)
    assert unguided.negative_index.tolist() == [1, 0]

    loss = TripletLoss(anchors="title", guide=StartingModelGuide(load_masked_lm(tiny_model_path)))
    guided = loss(titles, descriptions, guide_vectors=guide_vectors)
    # Title 0 keeps only description 1; title 1 has nothing left but the guide's verdict leaves none.
    assert guided.anchor_index.tolist() == [0] and guided.negative_index.tolist() == [3]
    assert guided.statistics["filtered_candidate_rate"] == 5 / 8
    assert loss.get_config_dict()["false_negative_filter"] is True
    with pytest.raises(ValueError, match="guide_vectors"):
        loss(titles, descriptions)
    with pytest.raises(ValueError, match="needs a guide"):
        TripletLoss(false_negative_margin=0.05)


@pytest.mark.parametrize("tokenizing_chunk", [lengths_module.TOKENIZING_CHUNK, 1])
def test_cached_vectors_equal_the_guides_forward_and_unseen_texts_are_encoded(
    tiny_model_path, tokenizer, monkeypatch, tokenizing_chunk
):
    """The cache files a text under its token ids after truncation, so a masked batch, a text cut
    at max_length and a batch mixing cached and unseen texts all get the forward's vectors; texts
    tokenized in several chunks land on their own rows."""
    monkeypatch.setattr(lengths_module, "TOKENIZING_CHUNK", tokenizing_chunk)
    model = load_masked_lm(tiny_model_path)
    items = [
        {"title": "Pinot Gris", "description": "Tart and snappy, with lime and a saline finish. " * 3},
        {"title": "Etna Bianco", "description": "Broom."},
        {"title": "Rioja Reserva", "description": "Vanilla and dried cherry over firm tannins."},
    ]
    torch.manual_seed(0)
    batch = MetricBertCollator(tokenizer, max_length=12, mlm_probability=0.5)(items)
    fields = ("title", "description")
    plain = StartingModelGuide(model).embed(batch, fields)

    cached = StartingModelGuide(model)
    texts = [item[name] for item in items[:2] for name in fields]  # the third item is not cached
    tokens = TokenRows.tokenize(tokenizer, texts + texts[:1], max_length=12)
    cached.cache_embeddings(
        tokenizer,
        texts + texts[:1],
        keys=tokens.keys,
        lengths=tokens.lengths,
        max_length=12,
        device=torch.device("cpu"),
        autocast=contextlib.nullcontext,
    )
    assert cached.cached_texts == 4
    torch.testing.assert_close(cached.embed(batch, fields), plain, atol=1e-5, rtol=1e-5)

    # The cache answers without the encoder: a broken encoder changes nothing for cached texts.
    with torch.no_grad():
        cached.encoder.embeddings.word_embeddings.weight.zero_()
    looked_up = cached.embed(MetricBertCollator(tokenizer, max_length=12)(items[:2]), fields)
    torch.testing.assert_close(looked_up, plain[[0, 1, 3, 4]], atol=1e-5, rtol=1e-5)


def test_a_float16_cache_holds_the_float32_vectors_rounded_in_half_the_memory(tiny_model_path, tokenizer):
    """``guide_embedding_cache_dtype float16``: the cache keeps each vector rounded once, and a
    lookup, of cached texts alone or beside unseen ones, hands the loss float32 vectors."""
    model = load_masked_lm(tiny_model_path)
    items = [
        {"title": "Pinot Gris", "description": "Tart and snappy, with lime and a saline finish."},
        {"title": "Etna Bianco", "description": "Broom."},
        {"title": "Rioja Reserva", "description": "Vanilla and dried cherry over firm tannins."},
    ]
    fields = ("title", "description")
    texts = [item[name] for item in items[:2] for name in fields]
    tokens = TokenRows.tokenize(tokenizer, texts, max_length=12)
    guides = {}
    for storage in CacheStorage:
        guides[storage] = StartingModelGuide(model)
        guides[storage].cache_embeddings(
            tokenizer,
            texts,
            keys=tokens.keys,
            lengths=tokens.lengths,
            max_length=12,
            device=torch.device("cpu"),
            autocast=contextlib.nullcontext,
            storage=storage,
        )
    full, half = guides[CacheStorage.FLOAT32].cache_matrix(), guides[CacheStorage.FLOAT16].cache_matrix()
    assert half.dtype == torch.float16 and half.nbytes * 2 == full.nbytes
    assert torch.equal(half, full.half())
    collate = MetricBertCollator(tokenizer, max_length=12)
    for batch_items in (items[:2], items):  # every text cached; the third item's encoded
        batch = collate(batch_items)
        looked_up = guides[CacheStorage.FLOAT16].embed(batch, fields)
        expected = guides[CacheStorage.FLOAT32].embed(batch, fields)
        cached = [0, 1, len(batch_items), len(batch_items) + 1]  # the first two items' titles, descriptions
        expected[cached] = expected[cached].half().float()
        assert looked_up.dtype == torch.float32 and torch.equal(looked_up, expected)
