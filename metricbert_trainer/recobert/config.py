"""``RecoBertConfig``: the training and inference settings of RecoBERT."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from metricbert_trainer.base.option_rules import Range, at_least, within
from metricbert_trainer.base.parameter_docs import documented_parameters
from metricbert_trainer.training.config import CatalogTrainerConfig

# lambda_1..lambda_4 of the four inference scores, in this order.
SCORE_NAMES = ("cos_description", "cos_title", "tdm_candidate_title", "tdm_seed_title")


@documented_parameters(
    {
        "The loss": (
            "tdm_weight",
            "negative_probability",
        ),
        "Inference": (
            "inference_weights",
            "rerank_top_k",
        ),
        "Shared settings with RecoBERT's own defaults": (
            "max_length",
            "cpu_bf16",
        ),
    }
)
@dataclass
class RecoBertConfig(CatalogTrainerConfig):
    """``TrainingArguments`` plus RecoBERT's loss ``L = mlm_weight * L_MLM + tdm_weight * L_TDM``
    and the settings of its four-score inference.

    ``L_TDM`` is the binary cross-entropy of the title-description matching score on pairs whose
    description is the item's own or, with ``negative_probability``, another item's
    (``recobert.collator``), half the pairs by default. The paper adds MLM with weight 1 on 15%
    masked tokens (``recipes/wines/recobert_paper.yaml``); on the default model, which ships
    without an MLM head, that term wrecked the rankings (docs/recobert.md), so it is off by default. Inference (``recobert.inference``) sums the z-normalised scores
    Cos_D, Cos_T, C_TDM(t_candidate, d_seed), C_TDM(t_seed, d_candidate) weighted by
    ``inference_weights``; ``rerank_top_k`` scores the cross pairs of the best K candidates of the
    first two only, which is what the ranking evaluation during training uses.
    """

    cpu_bf16: bool = field(
        default=False,
        metadata={
            "help": "Train under bf16 autocast on CPUs with AMX (off for RecoBERT: its rankings under "
            "bf16 training have not been measured)."
        },
    )
    tdm_weight: float = field(
        default=1.0, metadata={"help": "Weight of the title-description matching (TDM) loss."}
    )
    negative_probability: float = field(
        default=0.5,
        metadata={"help": "Probability that a training pair gets another item's description (label 0)."},
    )
    max_length: int = field(
        default=256, metadata={"help": "The joint title-description input is truncated to this many tokens."}
    )
    inference_weights: list[float] = field(
        default_factory=lambda: [1.0, 1.0, 1.0, 1.0],
        metadata={
            "help": "lambda_1..lambda_4 of the inference scores Cos_D, Cos_T, C_TDM(t_candidate, d_seed), "
            "C_TDM(t_seed, d_candidate).",
            "nargs": 4,
        },
    )
    rerank_top_k: int = field(
        default=100,
        metadata={
            "help": "Ranking evaluation scores cross pairs for the top K candidates of Cos_D + Cos_T only; "
            "0 scores every candidate (one forward per seed and candidate)."
        },
    )

    option_ranges: ClassVar[dict[str, Range]] = {
        "tdm_weight": at_least(0),
        "negative_probability": within(0, 1),
        "rerank_top_k": at_least(0),
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        self.inference_weights = [float(weight) for weight in self.inference_weights]
        if len(self.inference_weights) != len(SCORE_NAMES):
            raise ValueError(
                f"inference_weights needs {len(SCORE_NAMES)} values ({', '.join(SCORE_NAMES)}); "
                f"got {self.inference_weights}."
            )

    def loss_weights(self) -> dict[str, float]:
        return {"tdm_weight": self.tdm_weight, **super().loss_weights()}

    def in_batch_terms(self) -> dict[str, int]:
        """TDM's negative pairs take another item's description from the batch."""
        return {"tdm_weight": 2} if self.tdm_weight > 0 and self.negative_probability > 0 else {}

    def loss_config(self) -> dict[str, object]:
        """The objective and inference settings a model card records."""
        return {
            "objective": "recobert_tdm",
            "tdm_weight": self.tdm_weight,
            "mlm_weight": self.mlm_weight,
            "mlm_probability": self.mlm_probability,
            "negative_probability": self.negative_probability,
            "max_length": self.max_length,
            "inference_weights": dict(zip(SCORE_NAMES, self.inference_weights, strict=True)),
        }
