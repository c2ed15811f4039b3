"""Warming up an untrained MLM head before MetricBERT's joint objective starts.

The paper trains ``L_MLM + lambda * L_T`` from BERT checkpoints whose MLM head was pre-trained
with them. Sentence encoders such as all-MiniLM-L6-v2 ship without one: transformers initialises
it, the MLM loss starts near ``ln(vocabulary) ≈ 10.3``, and its gradient, flowing into the encoder
through a head that predicts nothing, pulls the encoder towards whatever makes a random head
less wrong (docs/quality.md measured -4 MPR for that). Training the head alone first, with the
encoder frozen, gives the joint objective a head that already reads the encoder's hidden states,
so the MLM gradient into the encoder carries language-model signal from the first joint step.

Only the head's own parameters train (its transform and the output bias); the decoder matrix is
tied to the word embeddings, which belong to the encoder and stay frozen here. The output bias
can start from the catalog's word prior (``word_prior``), counted without the model.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from metricbert_trainer.base.attention import attention_dropout_off
from metricbert_trainer.base.collator import field_inputs
from metricbert_trainer.base.distributed import world_size
from metricbert_trainer.base.length_groups import group_inputs, split_by_length
from metricbert_trainer.base.modeling import (
    copy_parameters_into_partitioned,
    find_mlm_head,
    is_partitioned,
    mlm_head_own_parameters,
    whole_copy,
)
from metricbert_trainer.base.vocabulary_loss import head_cross_entropy
from metricbert_trainer.metricbert.word_prior import set_output_bias

logger = logging.getLogger(__name__)

# Batches whose MLM loss is measured before and after the warm-up (the same batches both times).
PROBE_BATCHES = 4


@dataclass(frozen=True)
class MlmHeadWarmup:
    """What the warm-up did: its steps, the batches it encoded once and their masked tokens (0: a
    fresh batch each step), the mean MLM loss on the probe batches before, with the word prior
    when one was set (``None`` otherwise) and after, its wall time."""

    steps: int
    loss_before: float
    loss_after: float
    encoded_batches: int = 0
    encoded_tokens: int = 0
    seconds: float = 0.0
    loss_with_prior: float | None = None


def head_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The parameters the warm-up trains: the MLM head's own (``modeling.mlm_head_own_parameters``)."""
    if find_mlm_head(model) is None:
        raise ValueError(
            f"{type(model).__name__} has no MLM head this package knows (cls or lm_head): "
            "mlm_head_warmup_steps cannot be used with it."
        )
    return [parameter for _, parameter in mlm_head_own_parameters(model)]


def frozen_masked_states(
    model: torch.nn.Module, batch: dict[str, torch.Tensor], fields: tuple[str, ...], length_groups: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """The encoder's last hidden states at the masked positions of every field of ``batch`` and
    their labels (``[M, H]``, ``[M]``), each field encoded in ``length_groups`` groups of similar
    length (``base.length_groups``): all the head needs, without the padding's work."""
    states, targets = [], []
    for name in fields:
        inputs = field_inputs(batch, name)
        labels = inputs.pop("labels")
        for rows in split_by_length(inputs["attention_mask"], length_groups):
            group = group_inputs(inputs, rows)
            group_labels = labels[rows, : group["input_ids"].shape[1]]
            masked = group_labels != -100
            states.append(model.base_model(**group).last_hidden_state[masked])
            targets.append(group_labels[masked])
    return torch.cat(states), torch.cat(targets)


def head_loss(model: torch.nn.Module, states: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """The MLM loss of the head alone on ``frozen_masked_states``' output."""
    hidden, labels = states
    return head_cross_entropy(model, find_mlm_head(model), hidden, labels)


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
    masked_tokens: int = 0,
    length_groups: int = 1,
    tokens_per_step: int = 0,
    word_prior: torch.Tensor | None = None,
    seed: int = 0,
) -> MlmHeadWarmup:
    """Trains the MLM head alone for ``steps`` batches of ``loader`` (cycled), AdamW at ``learning_rate``.

    It runs before the training loop's own progress bar, and on a CPU can take minutes: it says
    when it starts and ends, and ``show_progress`` draws a bar of its steps.

    ``masked_tokens`` = 0 encodes a fresh batch for every step. Above 0, the frozen encoder
    encodes fresh batches once, in ``length_groups`` groups, until their masked positions hold
    that many tokens (at most one batch per step; in a distributed run each process holds its
    share), and the head's steps cycle through those states: the encoder is frozen, so
    re-encoding would only redraw the dropout masks, and on long descriptions the steps that each
    encode a batch take as long as the whole training (benchmarks/RESULTS.md, "The MLM-head
    warm-up"). The budget counts tokens, not batches, because what the head learns first is the
    catalog's word prior: 32 wine batches (about 11,000 masked tokens) left it short and cost the
    wine sample MPR, 32 Debian batches (twice as many tokens each) did not (docs/quality.md).
    Dropout stays on in both modes, as in the joint steps whose states the head will then read,
    except on the attention probabilities while the budget's batches are encoded
    (``attention_dropout_off``): on a CPU those masks make scaled-dot-product attention leave its
    fused kernel, and they cost as much as the rest of the encoding (benchmarks/RESULTS.md).

    ``tokens_per_step`` > 0 trains each step on that many masked tokens drawn (``seed``) from what
    was encoded, rather than on every masked token of one batch: the head's step computes a
    softmax over the whole vocabulary for each token, and a Debian batch's 750 masked tokens made
    its 100 steps cost as much as the encoding (benchmarks/RESULTS.md). ``word_prior`` (log
    word-piece frequencies, ``word_prior.word_piece_log_prior``) is written into the output bias
    before the first step, so the steps do not spend themselves on it.

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
    options = dict(
        steps=steps,
        learning_rate=learning_rate,
        device=device,
        autocast=autocast,
        show_progress=show_progress,
        masked_tokens=masked_tokens,
        length_groups=length_groups,
        tokens_per_step=tokens_per_step,
        word_prior=word_prior,
        seed=seed,
    )
    if not is_partitioned(model):
        return _warm_up_whole(model, loader, fields, **options)
    whole = whole_copy(model)
    warmup = _warm_up_whole(whole, loader, fields, **options)
    trained = [name for name, _ in mlm_head_own_parameters(model)]
    copy_parameters_into_partitioned(find_mlm_head(model), find_mlm_head(whole), trained)
    return warmup


def _warm_up_whole(
    model,
    loader,
    fields,
    *,
    steps,
    learning_rate,
    device,
    autocast,
    show_progress,
    masked_tokens,
    length_groups,
    tokens_per_step,
    word_prior,
    seed,
) -> MlmHeadWarmup:
    parameters = head_parameters(model)
    frozen = [parameter for parameter in parameters if not parameter.requires_grad]
    for parameter in frozen:
        parameter.requires_grad_(True)
    model.to(device)
    was_training = model.training
    model.train()
    batches = _cycle(loader)
    draws = torch.Generator().manual_seed(seed)
    started = time.perf_counter()
    if masked_tokens:
        probes, encoded, encoded_tokens = _encode_once(
            model,
            batches,
            fields,
            budget=math.ceil(masked_tokens / world_size()),
            most_batches=steps,
            device=device,
            autocast=autocast,
            length_groups=length_groups,
            show_progress=show_progress,
        )

        pool = (torch.cat([states for states, _ in encoded]), torch.cat([labels for _, labels in encoded]))

        def probe_loss(states: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
            return head_loss(model, states)

        def step_states(step: int) -> tuple[torch.Tensor, torch.Tensor]:
            if tokens_per_step:
                return _draw(pool, tokens_per_step, draws)
            return encoded[step % len(encoded)]
    else:
        encoded, encoded_tokens = [], 0
        probes = [_to_device(next(batches), device) for _ in range(PROBE_BATCHES)]

        def probe_loss(batch: dict[str, torch.Tensor]) -> torch.Tensor:
            with torch.no_grad():
                return head_loss(model, frozen_masked_states(model, batch, fields))

        def step_states(step: int) -> tuple[torch.Tensor, torch.Tensor]:
            with torch.no_grad():
                states = frozen_masked_states(model, _to_device(next(batches), device), fields)
            return _draw(states, tokens_per_step, draws) if tokens_per_step else states

    optimizer = torch.optim.AdamW(parameters, lr=learning_rate, weight_decay=0.0)
    try:
        before = _probe_loss(probe_loss, probes, autocast)
        with_prior = None
        if word_prior is not None:
            set_output_bias(model, word_prior)
            with_prior = _probe_loss(probe_loss, probes, autocast)
        for step in tqdm(range(steps), desc="MLM-head warm-up", disable=not show_progress):
            with autocast():
                loss = head_loss(model, step_states(step))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            _average_across_processes(parameters)
            optimizer.step()
        after = _probe_loss(probe_loss, probes, autocast)
    finally:
        for parameter in frozen:
            parameter.requires_grad_(False)
        model.train(was_training)
    seconds = time.perf_counter() - started
    prior = "" if with_prior is None else f" -> {with_prior:.3f} (word prior)"
    logger.info(
        "MLM-head warm-up, %d steps in %.1f s: MLM loss %.3f%s -> %.3f.", steps, seconds, before, prior, after
    )
    return MlmHeadWarmup(steps, before, after, len(encoded), encoded_tokens, seconds, with_prior)


def _encode_once(
    model, batches, fields, *, budget, most_batches, device, autocast, length_groups, show_progress
) -> tuple[list, list, int]:
    """The probe batches' masked states, then fresh batches' until they hold ``budget`` masked
    tokens or number ``most_batches``, and how many masked tokens those hold."""
    logger.info("MLM-head warm-up: encoding batches once until they hold %d masked tokens.", budget)
    progress = tqdm(total=budget, desc="MLM-head warm-up, encoding masked tokens", disable=not show_progress)

    def encode_next() -> tuple[torch.Tensor, torch.Tensor]:
        return frozen_masked_states(model, _to_device(next(batches), device), fields, length_groups)

    encoded, held = [], 0
    with torch.no_grad(), autocast(), attention_dropout_off(model):
        probes = [encode_next() for _ in range(PROBE_BATCHES)]
        while held < budget and len(encoded) < most_batches:
            encoded.append(encode_next())
            tokens = len(encoded[-1][1])
            progress.update(min(tokens, budget - held))
            held += tokens
    progress.close()
    logger.info("MLM-head warm-up: %d batches encoded, %d masked tokens.", len(encoded), held)
    return probes, encoded, held


def _draw(
    states: tuple[torch.Tensor, torch.Tensor], count: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` of the masked tokens in ``states`` (all of them if they are fewer), without repeats."""
    hidden, labels = states
    if len(labels) <= count:
        return states
    rows = torch.randperm(len(labels), generator=generator)[:count].to(labels.device)
    return hidden[rows], labels[rows]


def _probe_loss(probe_loss, probes: list, autocast) -> float:
    with torch.no_grad(), autocast():
        return sum(float(probe_loss(probe)) for probe in probes) / len(probes)


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
