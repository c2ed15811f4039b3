"""What one training step's loss terms read, and what each gives back.

``MetricBertTrainer.compute_loss`` runs the model once, gathers the pooled vectors across
processes when negatives are mined globally, and asks the frozen guide for its vectors when a
term needs them: ``StepVectors`` holds that, and every term (``metricbert.terms``) turns it into
its weighted share of the loss and the statistics it logs, as sentence-transformers' losses each
turn a batch's embeddings into one loss.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from metricbert_trainer.base.distributed import ProcessShard


@dataclass(frozen=True)
class StepVectors:
    """One micro-batch, encoded.

    Attributes:
        inputs: the collated batch (``MetricBertCollator``).
        outputs: the model's outputs: ``mlm_loss`` and ``mlm_tokens`` beside the vectors.
        titles, descriptions: the student's pooled vectors of each item's two texts, ``[B, H]``
            (every process's, when gathered).
        fields: the names of an item's two texts in the batch (``collator.batch_slots``).
        guide_vectors: the frozen start's vectors, ``[2B, H]`` field-major, or None when no term
            runs the guide on this step.
        shard: this process's rows of the gathered batch, or None on one process.
        global_step: the optimizer steps done before this one (the MLM term's ramp reads it).
    """

    inputs: dict[str, torch.Tensor]
    outputs: dict[str, torch.Tensor]
    titles: torch.Tensor
    descriptions: torch.Tensor
    fields: tuple[str, str]
    guide_vectors: torch.Tensor | None = None
    shard: ProcessShard | None = None
    global_step: int = 0


@dataclass
class TermValue:
    """A term's weighted share of the loss (None: logged only, not trained on) and its statistics."""

    loss: torch.Tensor | None
    statistics: dict[str, torch.Tensor | float] = field(default_factory=dict)


class LossTerm(Protocol):
    """One term of MetricBERT's loss: ``name`` keys its logged gradient norm (``log_gradient_norms``)."""

    name: str

    def __call__(self, step: StepVectors) -> TermValue: ...
