"""MetricBERT's training forward pass: ``model(metric_batch=batch, fields=..., pooling_input=...)``.

Each field is encoded at its own padded length (titles are short, descriptions long) and
mean-pooled over the last hidden layer; the MLM loss of all fields is computed in the same pass,
so one forward serves both terms of the paper's loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

import torch
from transformers import PreTrainedModel

from metricbert_trainer.base.collator import field_inputs, unmasked
from metricbert_trainer.base.modeling import add_forward_pass, encode_and_mlm, mean_mlm_loss
from metricbert_trainer.base.pooling import mean_pool


class PoolingInput(str, Enum):
    """Which pass the sentence vectors are pooled from. ``masked``: the MLM pass itself (the
    paper: one forward serves both losses). ``unmasked``: a second pass over the original tokens,
    so the metric is learned on the text that inference will see."""

    MASKED = "masked"
    UNMASKED = "unmasked"


def enable_metric_forward(model: PreTrainedModel) -> PreTrainedModel:
    """Lets ``model(metric_batch=batch, fields=..., pooling_input=...)`` run the MetricBERT pass.

    Any other call goes to the model's own forward. The pass encodes each field on its own and
    returns ``{"embeddings": [F, B, H], "mlm_loss": scalar, "mlm_tokens": scalar}``; ``mlm_loss``
    is the mean cross-entropy over all masked tokens of all fields (0 when nothing is masked).
    """
    return add_forward_pass(model, "metric_batch", _metric_forward)


def _metric_forward(
    model, plain_forward, head, batch, fields: Sequence[str] = (), pooling_input=PoolingInput.MASKED
) -> dict[str, torch.Tensor]:
    pooling_input = PoolingInput(pooling_input)
    pooled, loss_sum, token_count = [], None, 0
    for name in fields:
        inputs = field_inputs(batch, name)
        labels = inputs.pop("labels", None)
        hidden, field_loss_sum, field_tokens = encode_and_mlm(model, plain_forward, head, inputs, labels)
        if field_loss_sum is not None:
            loss_sum = field_loss_sum if loss_sum is None else loss_sum + field_loss_sum
            token_count += field_tokens
        if pooling_input is PoolingInput.UNMASKED and labels is not None:
            hidden = model.base_model(**unmasked({**inputs, "labels": labels})).last_hidden_state
        pooled.append(mean_pool(hidden, inputs["attention_mask"]))
    embeddings = torch.stack(pooled)
    return {"embeddings": embeddings, **mean_mlm_loss(loss_sum, token_count, embeddings)}
