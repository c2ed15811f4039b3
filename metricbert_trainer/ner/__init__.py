"""Multi-task NER (Siskind & Shah, "Multi-Task Triplet Loss for Named Entity Recognition using
Supplementary Text"): a tagger trained on item titles with a title/description term from
MetricBERT's loss family, on the shared ``CatalogTrainer``.

Holds the trainer and its config, the collator and forward pass, tagged-catalog loading and tag
alignment (``dataset``, ``tagging``), and the evaluation (``metrics``, ``evaluator``).
"""

from metricbert_trainer.ner.collator import NerCollator
from metricbert_trainer.ner.config import NerConfig
from metricbert_trainer.ner.dataset import TaggedCatalog, load_tagged_catalog
from metricbert_trainer.ner.evaluator import TaggingEvaluator, predict_tags
from metricbert_trainer.ner.losses import title_description_loss
from metricbert_trainer.ner.metrics import entities, tagging_metrics
from metricbert_trainer.ner.modeling import enable_tagging_forward, load_tagger
from metricbert_trainer.ner.tagging import Span, TaggingError, align_labels, locate_span, spans_to_tags
from metricbert_trainer.ner.trainer import NerTrainer

__all__ = [
    "NerCollator",
    "NerConfig",
    "NerTrainer",
    "Span",
    "TaggedCatalog",
    "TaggingError",
    "TaggingEvaluator",
    "align_labels",
    "enable_tagging_forward",
    "entities",
    "load_tagged_catalog",
    "load_tagger",
    "locate_span",
    "predict_tags",
    "spans_to_tags",
    "tagging_metrics",
    "title_description_loss",
]
