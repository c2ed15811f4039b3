"""MetricBERT (Malkiel, Ginzburg et al., ICASSP 2022): self-supervised metric learning between an
item's title and description, trained on the shared ``CatalogTrainer``.

Holds the trainer and its config, the collator, the forward pass, the loss family with its
mining, and the helpers only MetricBERT uses: the starting-model guide that filters false
negatives (``guide``) and the MLM-head warm-up (``mlm_warmup``).
"""

from metricbert_trainer.metricbert.collator import MetricBertCollator
from metricbert_trainer.metricbert.config import MetricBertConfig
from metricbert_trainer.metricbert.forward import PoolingInput, enable_metric_forward
from metricbert_trainer.metricbert.trainer import MetricBertTrainer

__all__ = [
    "MetricBertCollator",
    "MetricBertConfig",
    "MetricBertTrainer",
    "PoolingInput",
    "enable_metric_forward",
]
