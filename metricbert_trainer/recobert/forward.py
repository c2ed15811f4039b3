"""RecoBERT's training forward pass: ``model(pair_batch=batch)``.

One joint ``title [SEP] description`` input per row (``recobert.pairs``); each field is
mean-pooled over its own segment of the joint output, and the MLM loss comes from the same pass.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from metricbert_trainer.base.modeling import MaskedTokenLoss, add_forward_pass
from metricbert_trainer.base.pooling import mean_pool

# The tensors of a RecoBERT pair batch that the encoder itself takes.
PAIR_ENCODER_KEYS = ("input_ids", "attention_mask", "token_type_ids")


def enable_pair_forward(model: PreTrainedModel) -> PreTrainedModel:
    """Lets ``model(pair_batch=batch)`` run the RecoBERT pass, which returns
    ``{"title_embeddings": [B, H], "description_embeddings": [B, H], "mlm_loss": scalar,
    "mlm_tokens": scalar}``. Any other call goes to the model's own forward."""
    return add_forward_pass(model, "pair_batch", _pair_forward)


def _pair_forward(model, plain_forward, head, batch) -> dict[str, torch.Tensor]:
    inputs = {name: batch[name] for name in PAIR_ENCODER_KEYS if name in batch}
    mlm = MaskedTokenLoss(model, plain_forward, head)
    hidden = mlm.encode(inputs, batch.get("labels"))
    titles = mean_pool(hidden, batch["title_mask"])
    descriptions = mean_pool(hidden, batch["description_mask"])
    return {
        "title_embeddings": titles,
        "description_embeddings": descriptions,
        **mlm.result(titles),
    }
