"""metricbert-trainer: Hugging Face Trainer recipes for MetricBERT (Malkiel, Ginzburg et al., ICASSP 2022)."""

from metricbert_trainer.base.distances import Distance, paired_distance, pairwise_distance
from metricbert_trainer.base.modeling import load_masked_lm
from metricbert_trainer.data.catalog import Catalog, CatalogError, load_catalog
from metricbert_trainer.metricbert.collator import MetricBertCollator
from metricbert_trainer.metricbert.config import MetricBertConfig
from metricbert_trainer.metricbert.forward import PoolingInput, enable_metric_forward
from metricbert_trainer.metricbert.losses import (
    ContrastiveLoss,
    CosineLoss,
    LogisticTripletLoss,
    MultipleNegativesRankingLoss,
    Objective,
    TripletLoss,
    build_loss,
)
from metricbert_trainer.metricbert.losses.mining import Anchors, Mining, NegativePool
from metricbert_trainer.metricbert.trainer import MetricBertTrainer
from metricbert_trainer.scripts.arguments import DataArguments, ModelArguments

__version__ = "0.1.0"

__all__ = [
    "Anchors",
    "Catalog",
    "CatalogError",
    "ContrastiveLoss",
    "CosineLoss",
    "DataArguments",
    "Distance",
    "LogisticTripletLoss",
    "MetricBertCollator",
    "MetricBertConfig",
    "MetricBertTrainer",
    "Mining",
    "ModelArguments",
    "MultipleNegativesRankingLoss",
    "NegativePool",
    "Objective",
    "PoolingInput",
    "TripletLoss",
    "build_loss",
    "enable_metric_forward",
    "load_catalog",
    "load_masked_lm",
    "paired_distance",
    "pairwise_distance",
]
