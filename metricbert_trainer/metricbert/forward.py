"""MetricBERT's training forward pass: ``model(metric_batch=batch, fields=..., pooling_input=...)``.

Each field is encoded at its own padded length (titles are short, descriptions long), in
``length_groups`` groups of similar length when asked (``base.length_groups``), and mean-pooled
over the last hidden layer; the MLM loss of all fields is computed in the same pass (one head
call over the masked tokens of every field and group), so one forward serves both terms of the
paper's loss. With ``pooling_input: unmasked`` the vectors come from a second pass over the
original tokens and the masked pass serves the MLM term alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import Enum

import torch
from transformers import PreTrainedModel

from metricbert_trainer.base.collator import field_inputs, unmasked
from metricbert_trainer.base.embedding_lookup import shared_word_embedding_lookup
from metricbert_trainer.base.length_groups import group_inputs, in_batch_order, split_by_length
from metricbert_trainer.base.modeling import MaskedTokenLoss, add_forward_pass
from metricbert_trainer.base.pooling import mean_pool


class PoolingInput(str, Enum):
    """Which pass the sentence vectors are pooled from. ``masked``: the MLM pass itself (the
    paper: one forward serves both losses). ``unmasked``: a second pass over the original tokens,
    so the metric is learned on the text that inference will see, at the cost of a second student
    pass; on Debian packages it measured lower than one pass (docs/quality.md)."""

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
    pooled, mlm = [], MaskedTokenLoss(model, plain_forward, head)
    field_tensors = [field_inputs(batch, name) for name in fields]
    # With a second pass, the vectors come from each masked field's original tokens.
    originals = [
        unmasked(inputs) if pooling_input is PoolingInput.UNMASKED and "labels" in inputs else None
        for inputs in field_tensors
    ]
    read_tokens = [inputs["input_ids"] for inputs in field_tensors]
    read_tokens += [original["input_ids"] for original in originals if original is not None]
    with shared_word_embedding_lookup(model, read_tokens):
        for inputs, original in zip(field_tensors, originals, strict=True):
            if original is not None:
                pooled.append(_pooled(original, length_groups, _last_hidden_state(model)))
                for rows in split_by_length(inputs["attention_mask"], length_groups):
                    group = group_inputs(inputs, rows)
                    mlm.encode(group, group.pop("labels"))  # the masked pass serves the MLM term alone
            else:
                pooled.append(_pooled(inputs, length_groups, mlm.encode))
    embeddings = torch.stack(pooled)
    return {"embeddings": embeddings, **mlm.result(embeddings)}


def _last_hidden_state(model) -> Callable:
    return lambda inputs, labels: model.base_model(**inputs).last_hidden_state


def _pooled(inputs: dict[str, torch.Tensor], length_groups: int, encode: Callable) -> torch.Tensor:
    """Mean-pooled vectors of one field, in batch order, encoded in ``length_groups`` groups by
    ``encode(group_inputs, group_labels)``."""
    groups = split_by_length(inputs["attention_mask"], length_groups)
    parts = []
    for rows in groups:
        group = group_inputs(inputs, rows)
        labels = group.pop("labels", None)
        parts.append(mean_pool(encode(group, labels), group["attention_mask"]))
    return in_batch_order(parts, groups)
