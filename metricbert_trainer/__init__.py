"""metricbert-trainer: Hugging Face Trainer recipes for MetricBERT (Malkiel, Ginzburg et al., ICASSP 2022).

The public names below are imported on first use (PEP 562), as transformers does: importing one
module of the package (a data set's build script, ``metricbert_trainer.data.evaluation_sets``)
then imports that module alone, not the trainer with torch and transformers behind it, whose
import is most of a short script's time.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# Each public name and the module that defines it.
_PUBLIC_NAMES = {
    "Distance": "metricbert_trainer.base.distances",
    "paired_distance": "metricbert_trainer.base.distances",
    "pairwise_distance": "metricbert_trainer.base.distances",
    "load_masked_lm": "metricbert_trainer.base.modeling",
    "Catalog": "metricbert_trainer.data.catalog",
    "CatalogError": "metricbert_trainer.data.catalog",
    "load_catalog": "metricbert_trainer.data.catalog",
    "MetricBertCollator": "metricbert_trainer.metricbert.collator",
    "MetricBertConfig": "metricbert_trainer.metricbert.config",
    "PoolingInput": "metricbert_trainer.metricbert.forward",
    "enable_metric_forward": "metricbert_trainer.metricbert.forward",
    "ContrastiveLoss": "metricbert_trainer.metricbert.losses",
    "CosineLoss": "metricbert_trainer.metricbert.losses",
    "LogisticTripletLoss": "metricbert_trainer.metricbert.losses",
    "MultipleNegativesRankingLoss": "metricbert_trainer.metricbert.losses",
    "Objective": "metricbert_trainer.metricbert.losses",
    "TripletLoss": "metricbert_trainer.metricbert.losses",
    "build_loss": "metricbert_trainer.metricbert.losses",
    "Anchors": "metricbert_trainer.metricbert.losses.mining",
    "Mining": "metricbert_trainer.metricbert.losses.mining",
    "NegativePool": "metricbert_trainer.metricbert.losses.mining",
    "MetricBertTrainer": "metricbert_trainer.metricbert.trainer",
    "DataArguments": "metricbert_trainer.scripts.arguments",
    "ModelArguments": "metricbert_trainer.scripts.arguments",
}

__all__ = sorted(_PUBLIC_NAMES, key=str.lower)


def __getattr__(name: str) -> object:
    if name not in _PUBLIC_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC_NAMES[name]), name)
    globals()[name] = value  # the next lookup finds it without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC_NAMES})
