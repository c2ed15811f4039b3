from __future__ import annotations

import torch
from transformers import AutoModel, BertConfig, BertForMaskedLM, BertModel

from metricbert_trainer.publishing.saved_layout import split_encoder_and_masked_lm


def test_the_saved_encoder_keeps_the_starts_pooler(tmp_path, tokenizer):
    """Mean pooling never trains BERT's pooler, and the masked-LM model has none: the encoder
    written on save takes the starting folder's, so ``pooler_output`` is the layer the start
    shipped (issue #90: it was drawn at random on every save). Without a start that has one, the
    pooler is the seeded draw of before."""
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    torch.manual_seed(3)
    start = BertModel(config)
    start.save_pretrained(tmp_path / "start")
    trained = BertForMaskedLM(config)
    for name in ("with-start", "without"):
        trained.save_pretrained(tmp_path / name)
    split_encoder_and_masked_lm(tmp_path / "with-start", start=tmp_path / "start")
    split_encoder_and_masked_lm(tmp_path / "without")

    kept = AutoModel.from_pretrained(tmp_path / "with-start")
    drawn = AutoModel.from_pretrained(tmp_path / "without")
    torch.testing.assert_close(kept.pooler.dense.weight, start.pooler.dense.weight)
    torch.testing.assert_close(kept.pooler.dense.bias, start.pooler.dense.bias)
    assert not torch.equal(drawn.pooler.dense.weight, start.pooler.dense.weight)
    # The trained encoder's own weights are the masked-LM model's, not the start's.
    torch.testing.assert_close(
        kept.embeddings.word_embeddings.weight, trained.bert.embeddings.word_embeddings.weight
    )
