"""metricbert-trainer: Hugging Face Trainer recipes for MetricBERT (Malkiel, Ginzburg et al., ICASSP 2022)."""

from .catalog import Catalog, CatalogError, load_catalog
from .collator import MetricBertCollator
from .config import DataArguments, MetricBertConfig, ModelArguments
from .distances import Distance, paired_distance, pairwise_distance
from .losses import (
    ContrastiveLoss,
    CosineLoss,
    LogisticTripletLoss,
    MultipleNegativesRankingLoss,
    Objective,
    TripletLoss,
    build_loss,
)
from .mining import Anchors, Mining, NegativePool
from .modeling import PoolingInput, enable_metric_forward, load_masked_lm
from .trainer import MetricBertTrainer

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
