"""MetricBERT's training forward pass: ``model(metric_batch=batch, fields=..., pooling_input=...)``.

Each field is encoded at its own padded length (titles are short, descriptions long), in
``length_groups`` groups of similar length when asked (``base.length_groups``), and mean-pooled
over the last hidden layer; the MLM loss of all fields is computed in the same pass (one head
call over the masked tokens of every field and group), so one forward serves both terms of the
paper's loss. With ``pooling_input: unmasked`` the vectors come from a second pass over the
original tokens and the masked pass serves the MLM term alone. With ``joint_fields`` every field
is encoded in one pass (``joined_fields``): half the encoder calls of a two-field step, for titles
padded to the descriptions' width.
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
    """Lets ``model(metric_batch=batch, fields=..., pooling_input=..., length_groups=...,
    joint_fields=...)`` run the MetricBERT pass.

    Any other call goes to the model's own forward. The pass encodes each field on its own (or all
    of them in one batch with ``joint_fields``) and returns ``{"embeddings": [F, B, H],
    "mlm_loss": scalar, "mlm_tokens": scalar}``; ``mlm_loss`` is the mean cross-entropy over all
    masked tokens of all fields (0 when nothing is masked).
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
    joint_fields: bool = False,
) -> dict[str, torch.Tensor]:
    pooling_input = PoolingInput(pooling_input)
    pooled, mlm = [], MaskedTokenLoss(model, plain_forward, head)
    field_tensors = [field_inputs(batch, name) for name in fields]
    if joint_fields:
        field_tensors = [joined_fields(field_tensors)]
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
    embeddings = pooled[0].unflatten(0, (len(fields), -1)) if joint_fields else torch.stack(pooled)
    return {"embeddings": embeddings, **mlm.result(embeddings)}


def joined_fields(field_tensors: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Every field's rows in one batch, field after field, each tensor widened on the right to the
    widest field's columns (attention 0, labels -100), so one encoder call reads them all.

    Why: on an accelerator a MiniLM step of 32 items is bound by the host's kernel launches, not
    the arithmetic (benchmarks/RESULTS.md, "GPU rows"), and each encoder call launches every
    kernel again. The added columns are padding nobody attends to, and they sit after each row's
    own tokens, so every token keeps its position (left-padded rows included): each row's hidden
    states, its pooled vector and the MLM loss are those of its field's own pass, up to rounding.
    """
    if any(inputs.keys() != field_tensors[0].keys() for inputs in field_tensors):
        raise ValueError("A joint pass needs the same tensors (ids, mask, labels, ...) for every field.")
    width = max(inputs["input_ids"].shape[1] for inputs in field_tensors)
    fill = {"labels": -100}
    return {
        name: torch.cat(
            [
                torch.nn.functional.pad(
                    inputs[name], (0, width - inputs[name].shape[1]), value=fill.get(name, 0)
                )
                for inputs in field_tensors
            ]
        )
        for name in field_tensors[0]
    }


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
