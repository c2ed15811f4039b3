"""RecoBERT (Malkiel et al., Findings of EMNLP 2020): title-description matching and its four-score
inference, trained on the same ``CatalogTrainer`` machinery as MetricBERT."""

from .collator import RecoBertCollator
from .config import SCORE_NAMES, RecoBertConfig
from .inference import FourScores, PairEncoder, RecoBertRankingEvaluator, RecoBertScorer
from .pairs import encode_pairs
from .scores import tdm_loss, tdm_score, z_normalise
from .trainer import RecoBertTrainer

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
