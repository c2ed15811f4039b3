"""``NerConfig``: the training arguments of ``NerTrainer``, its multi-task loss included."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from metricbert_trainer.base.option_rules import Range, at_least
from metricbert_trainer.base.parameter_docs import documented_parameters
from metricbert_trainer.metricbert.losses import InBatchLoss, Objective
from metricbert_trainer.metricbert.losses.mining import Mining
from metricbert_trainer.ner.losses import title_description_loss
from metricbert_trainer.training.config import CatalogTrainerConfig


@documented_parameters(
    {
        "The multi-task loss": (
            "metric_weight",
            "objective",
            "mining",
        ),
    }
)
@dataclass
class NerConfig(CatalogTrainerConfig):
    """``TrainingArguments`` plus the multi-task loss ``L = L_NER + metric_weight * L_metric``.

    ``L_NER`` is the token-classification cross-entropy on the title's words; ``L_metric`` a
    member of the loss family (``metricbert_trainer.metricbert.losses``) with each title as the
    anchor, its own description as the positive and another item's description of the batch as the
    negative (``mining``; random, as in Siskind & Shah). ``metric_weight: 0`` trains NER alone and
    reads no descriptions.
    """

    metric_weight: float = field(
        default=1.0,
        metadata={
            "help": "Weight of the title/description metric term added to the NER loss; 0 trains NER alone "
            "(descriptions are then not read)."
        },
    )
    objective: Objective = field(
        default=Objective.LOGISTIC_TRIPLET,
        metadata={
            "help": "The metric term, from the loss family: logistic_triplet (the paper's -log sigmoid(c_p - c_n)), "
            "triplet, contrastive, cosine or mnrl (mnrl needs mining: hard)."
        },
    )
    mining: Mining = field(
        default=Mining.RANDOM,
        metadata={
            "help": "How a title's negative description is drawn from the batch: random (the paper: a random other "
            "item's description), hard or semi_hard."
        },
    )

    option_ranges: ClassVar[dict[str, Range]] = {"metric_weight": at_least(0)}

    def __post_init__(self) -> None:
        super().__post_init__()
        # Building the loss checks the combination (mnrl only mines hard) before any model loads.
        self.metric_loss()

    def metric_loss(self) -> InBatchLoss:
        """The metric term these settings describe."""
        return title_description_loss(self.objective, self.mining)

    def loss_weights(self) -> dict[str, float]:
        """The tagging loss always trains (weight 1); the metric term adds to it."""
        return {"ner": 1.0, "metric_weight": self.metric_weight}

    def in_batch_terms(self) -> dict[str, int]:
        """The metric term mines its negatives in the batch; the NER term alone needs none."""
        return {"metric_weight": 2} if self.metric_weight > 0 else {}

    def loss_config(self) -> dict[str, object]:
        """The loss settings a model card records beside the built term's own (the trainer adds them)."""
        return {
            "metric_weight": self.metric_weight,
            "objective": Objective(self.objective).value,
            "mining": Mining(self.mining).value,
        }
