"""RecoBERT (Malkiel et al., Findings of EMNLP 2020): title-description matching and its four-score
inference, trained on the same ``CatalogTrainer`` machinery as MetricBERT."""

from metricbert_trainer.recobert.collator import RecoBertCollator
from metricbert_trainer.recobert.config import SCORE_NAMES, RecoBertConfig
from metricbert_trainer.recobert.inference import (
    FourScores,
    PairEncoder,
    RecoBertRankingEvaluator,
    RecoBertScorer,
)
from metricbert_trainer.recobert.pairs import encode_pairs
from metricbert_trainer.recobert.scores import tdm_loss, tdm_score, z_normalise
from metricbert_trainer.recobert.trainer import RecoBertTrainer

__all__ = [
    "SCORE_NAMES",
    "FourScores",
    "PairEncoder",
    "RecoBertCollator",
    "RecoBertConfig",
    "RecoBertRankingEvaluator",
    "RecoBertScorer",
    "RecoBertTrainer",
    "encode_pairs",
    "tdm_loss",
    "tdm_score",
    "z_normalise",
]
