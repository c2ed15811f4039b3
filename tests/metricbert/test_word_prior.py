"""The catalog's word prior: log word-piece frequencies as the collators see the texts."""

from collections import Counter

import pytest
import torch

from metricbert_trainer.base.modeling import find_mlm_head, load_masked_lm
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.data.token_rows import TokenRows
from metricbert_trainer.metricbert.word_prior import SMOOTHING, set_output_bias, word_piece_log_prior


def test_prior_is_the_log_frequency_of_the_truncated_word_pieces_without_special_tokens(tokenizer, wines_csv):
    items = load_catalog(wines_csv).dataset.select(range(40))
    columns = [list(items["title"]), list(items["description"])]
    prior = word_piece_log_prior(tokenizer, [TokenRows.tokenize(tokenizer, texts, 16) for texts in columns])

    counts = Counter()
    for texts in columns:
        for text in texts:
            pieces = tokenizer(text, truncation=True, max_length=16, add_special_tokens=False)["input_ids"][
                :14
            ]
            counts.update(pieces)  # 16 minus [CLS] and [SEP]
    total = sum(counts.values()) + SMOOTHING * len(tokenizer)
    expected = torch.tensor(
        [
            torch.log(torch.tensor((counts.get(piece, 0) + SMOOTHING) / total)).item()
            for piece in range(len(tokenizer))
        ]
    )
    expected -= expected.mean()
    assert prior.shape == (len(tokenizer),)
    assert torch.allclose(prior, expected, atol=1e-4)
    # [CLS], [SEP], [PAD] and [MASK] get what a word piece the catalog never uses gets.
    unused = prior[tokenizer.convert_tokens_to_ids("zeppelin")]
    assert counts["zeppelin"] == 0
    for special in tokenizer.all_special_ids:
        assert prior[special] == pytest.approx(unused.item())
    most_common = counts.most_common(1)[0][0]
    assert prior.argmax().item() == most_common


def test_the_prior_becomes_the_heads_output_bias(tiny_model_path, tokenizer, wines_csv):
    model = load_masked_lm(tiny_model_path)
    items = load_catalog(wines_csv).dataset.select(range(40))
    prior = word_piece_log_prior(tokenizer, [TokenRows.tokenize(tokenizer, items["title"], 32)])
    set_output_bias(model, prior)
    # The bias the decoder adds, and the head's own parameter it is tied to.
    assert torch.equal(model.get_output_embeddings().bias.detach(), prior)
    assert torch.equal(find_mlm_head(model).predictions.bias.detach(), prior)
    with torch.no_grad():
        logits = model.get_output_embeddings()(torch.zeros(1, model.config.hidden_size))
    assert torch.equal(logits[0], prior)
