"""MetricBERT's training forward pass: ``model(metric_batch=batch, fields=..., pooling_input=...)``.

Each field is encoded at its own padded length (titles are short, descriptions long), in
``length_groups`` groups of similar length when asked (``base.length_groups``), and mean-pooled
over the last hidden layer; the MLM loss of all fields is computed in the same pass,
so one forward serves both terms of the paper's loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

import torch
from transformers import PreTrainedModel

from metricbert_trainer.base.collator import field_inputs, unmasked
from metricbert_trainer.base.length_groups import group_inputs, in_batch_order, split_by_length
from metricbert_trainer.base.modeling import add_forward_pass, encode_and_mlm, mean_mlm_loss
from metricbert_trainer.base.pooling import mean_pool


class PoolingInput(str, Enum):
    """Which pass the sentence vectors are pooled from. ``masked``: the MLM pass itself (the
    paper: one forward serves both losses). ``unmasked``: a second pass over the original tokens,
    so the metric is learned on the text that inference will see."""

    MASKED = "masked"
    UNMASKED = "unmasked"


def enable_metric_forward(model: PreTrainedModel) -> PreTrainedModel:
    """Lets ``model(metric_batch=batch, fields=..., pooling_input=..., length_groups=...)`` run the
    MetricBERT pass.

    Any other call goes to the model's own forward. The pass encodes each field on its own and
    returns ``{"embeddings": [F, B, H], "mlm_loss": scalar, "mlm_tokens": scalar}``; ``mlm_loss``
    is the mean cross-entropy over all masked tokens of all fields (0 when nothing is masked).
    """
    return add_forward_pass(model, "metric_batch", _metric_forward)


def _metric_forward(
    model,
    plain_forward,
    head,
    batch,
    fields: Sequence[str] = (),
    pooling_input=PoolingInput.MASKED,
    length_groups: int = 1,
) -> dict[str, torch.Tensor]:
    pooling_input = PoolingInput(pooling_input)
    pooled, loss_sum, token_count = [], None, 0
    for name in fields:
        inputs = field_inputs(batch, name)
        groups = split_by_length(inputs["attention_mask"], length_groups)
        parts = []
        for rows in groups:
            group = group_inputs(inputs, rows)
            labels = group.pop("labels", None)
            hidden, group_loss_sum, group_tokens = encode_and_mlm(model, plain_forward, head, group, labels)
            if group_loss_sum is not None:
                loss_sum = group_loss_sum if loss_sum is None else loss_sum + group_loss_sum
                token_count += group_tokens
            if pooling_input is PoolingInput.UNMASKED and labels is not None:
                hidden = model.base_model(**unmasked({**group, "labels": labels})).last_hidden_state
            parts.append(mean_pool(hidden, group["attention_mask"]))
        pooled.append(in_batch_order(parts, groups))
    embeddings = torch.stack(pooled)
    return {"embeddings": embeddings, **mean_mlm_loss(loss_sum, token_count, embeddings)}
