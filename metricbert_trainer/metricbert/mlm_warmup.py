"""Warming up an untrained MLM head before MetricBERT's joint objective starts.

The paper trains ``L_MLM + lambda * L_T`` from BERT checkpoints whose MLM head was pre-trained
with them. Sentence encoders such as all-MiniLM-L6-v2 ship without one: transformers initialises
it, the MLM loss starts near ``ln(vocabulary) ≈ 10.3``, and its gradient, flowing into the encoder
through a head that predicts nothing, pulls the encoder towards whatever makes a random head
less wrong (docs/quality.md measured -4 MPR for that). Training the head alone first, with the
encoder frozen, gives the joint objective a head that already reads the encoder's hidden states,
so the MLM gradient into the encoder carries language-model signal from the first joint step.

Only the head's own parameters train (its transform and the output bias); the decoder matrix is
tied to the word embeddings, which belong to the encoder and stay frozen here.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from metricbert_trainer.base.collator import field_inputs
from metricbert_trainer.base.distributed import world_size
from metricbert_trainer.base.modeling import (
    copy_parameters_into_partitioned,
    find_mlm_head,
    is_partitioned,
    mlm_head_own_parameters,
    whole_copy,
)

logger = logging.getLogger(__name__)

# Batches whose MLM loss is measured before and after the warm-up (the same batches both times).
PROBE_BATCHES = 4


@dataclass(frozen=True)
class MlmHeadWarmup:
    """What the warm-up did: its steps and the mean MLM loss on the probe batches before and after."""

    steps: int
    loss_before: float
    loss_after: float


def head_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The parameters the warm-up trains: the MLM head's own (``modeling.mlm_head_own_parameters``)."""
    if find_mlm_head(model) is None:
        raise ValueError(
            f"{type(model).__name__} has no MLM head this package knows (cls or lm_head): "
            "mlm_head_warmup_steps cannot be used with it."
        )
    return [parameter for _, parameter in mlm_head_own_parameters(model)]


def masked_lm_loss(
    model: torch.nn.Module, batch: dict[str, torch.Tensor], fields: tuple[str, ...]
) -> torch.Tensor:
    """The mean MLM loss over the batch's masked tokens, with the encoder's hidden states frozen."""
    head = find_mlm_head(model)
    logits, labels = [], []
    for name in fields:
        inputs = field_inputs(batch, name)
        field_labels = inputs.pop("labels")
        masked = field_labels != -100
        with torch.no_grad():
            hidden = model.base_model(**inputs).last_hidden_state
        logits.append(head(hidden[masked]))
        labels.append(field_labels[masked])
    return F.cross_entropy(torch.cat(logits).float(), torch.cat(labels))


def warm_up_mlm_head(
    model: torch.nn.Module,
    loader: DataLoader,
    fields: tuple[str, ...],
    *,
    steps: int,
    learning_rate: float,
    device: torch.device,
    autocast,
    show_progress: bool = False,
) -> MlmHeadWarmup:
    """Trains the MLM head alone for ``steps`` batches of ``loader`` (cycled), AdamW at ``learning_rate``.

    It runs before the training loop's own progress bar, and on a CPU can take minutes: it says
    when it starts and ends, and ``show_progress`` draws a bar of its steps.

    The first ``PROBE_BATCHES`` batches are held back to measure the MLM loss before and after.
    In a distributed run every process calls this with its own shard of the data; the head's
    gradients are averaged over processes before each step, so the heads stay identical.
    ``autocast`` is a zero-argument callable returning the run's mixed-precision context.

    It runs outside the training engine, on whole weights. A model DeepSpeed ZeRO-3 has
    partitioned is warmed up in a whole copy (``modeling.whole_copy``, held by every process for
    the warm-up only), whose head is then written back into the partitions: the same head a DDP
    run warms up, at the cost of one whole model per process while it lasts.
    """
    logger.info("MLM-head warm-up: training the head alone for %d steps, the encoder frozen.", steps)
    if not is_partitioned(model):
        return _warm_up_whole(model, loader, fields, steps, learning_rate, device, autocast, show_progress)
    whole = whole_copy(model)
    warmup = _warm_up_whole(whole, loader, fields, steps, learning_rate, device, autocast, show_progress)
    trained = [name for name, _ in mlm_head_own_parameters(model)]
    copy_parameters_into_partitioned(find_mlm_head(model), find_mlm_head(whole), trained)
    return warmup


def _warm_up_whole(
    model, loader, fields, steps, learning_rate, device, autocast, show_progress
) -> MlmHeadWarmup:
    parameters = head_parameters(model)
    frozen = [parameter for parameter in parameters if not parameter.requires_grad]
    for parameter in frozen:
        parameter.requires_grad_(True)
    model.to(device)
    was_training = model.training
    model.train()
    batches = _cycle(loader)
    probes = [_to_device(next(batches), device) for _ in range(PROBE_BATCHES)]
    optimizer = torch.optim.AdamW(parameters, lr=learning_rate, weight_decay=0.0)
    started = time.perf_counter()
    try:
        before = _probe_loss(model, probes, fields, autocast)
        for _ in tqdm(range(steps), desc="MLM-head warm-up", disable=not show_progress):
            with autocast():
                loss = masked_lm_loss(model, _to_device(next(batches), device), fields)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            _average_across_processes(parameters)
            optimizer.step()
        after = _probe_loss(model, probes, fields, autocast)
    finally:
        for parameter in frozen:
            parameter.requires_grad_(False)
        model.train(was_training)
    logger.info(
        "MLM-head warm-up, %d steps in %.1f s: MLM loss %.3f -> %.3f.",
        steps,
        time.perf_counter() - started,
        before,
        after,
    )
    return MlmHeadWarmup(steps, before, after)


def _probe_loss(model, probes: list[dict[str, torch.Tensor]], fields: tuple[str, ...], autocast) -> float:
    with torch.no_grad(), autocast():
        return sum(float(masked_lm_loss(model, batch, fields)) for batch in probes) / len(probes)


def _to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {key: tensor.to(device) for key, tensor in batch.items()}


def _cycle(loader: DataLoader):
    while True:
        yield from loader


def _average_across_processes(parameters: list[torch.nn.Parameter]) -> None:
    processes = world_size()
    if processes == 1:
        return
    for parameter in parameters:
        if parameter.grad is not None:
            torch.distributed.all_reduce(parameter.grad)
            parameter.grad /= processes
