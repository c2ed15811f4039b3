"""``NerTrainer``: multi-task NER on the shared trainer, a tagger plus a title/description metric term."""

from __future__ import annotations

from collections.abc import Sequence

from transformers import AutoTokenizer, PreTrainedModel

from metricbert_trainer.base.modeling import resolve_model_name
from metricbert_trainer.metricbert.losses import InBatchLoss
from metricbert_trainer.ner.collator import NerCollator
from metricbert_trainer.ner.config import NerConfig
from metricbert_trainer.ner.metrics import METRIC_NAMES
from metricbert_trainer.ner.modeling import enable_tagging_forward, load_tagger
from metricbert_trainer.publishing.markdown import json_block
from metricbert_trainer.publishing.model_card import CardMethod
from metricbert_trainer.training.trainer import CatalogTrainer, seed_before_loading

USAGE = """## Usage

```python
from transformers import pipeline

tagger = pipeline("token-classification", model={model_id}, aggregation_strategy="simple")
print(tagger({example}))
```

Descriptions were read in training only: the model tags a title alone.
"""


class NerTrainer(CatalogTrainer):
    """Trains an ``AutoModelForTokenClassification`` with ``L = L_NER + metric_weight * L_metric``.

    The training data are tagged items (``ner.dataset``: ``tokens``, ``tags`` and the two text
    fields); ``L_NER`` is the cross-entropy of the title's word tags, ``L_metric`` a member of the
    loss family on the title's and the descriptions' mean-pooled vectors (``NerConfig``), after
    Siskind & Shah, "Multi-Task Triplet Loss for Named Entity Recognition using Supplementary
    Text". Each step logs ``tagging_loss`` and, with ``metric_weight > 0``, ``<objective>_loss``
    and the mining statistics. Pass a ``ner.evaluator.TaggingEvaluator`` as ``ranking_evaluator``
    and ``evaluate()`` logs ``eval_precision``, ``eval_recall``, ``eval_f1``,
    ``eval_exact_match`` and ``eval_token_accuracy``. Checkpoints, resuming, the card and the Hub
    push are ``CatalogTrainer``'s; the saved folder loads in ``pipeline("token-classification")``.
    """

    _tag_names = ["token-classification", "ner", "multi-task", "metricbert-trainer"]
    sentence_encoder = False
    card_method = CardMethod(
        name="A multi-task NER tagger (Siskind & Shah, *Multi-Task Triplet Loss for Named Entity Recognition "
        "using Supplementary Text*)",
        family="Multi-task NER",
        goal="to tag the entities of an item's {fields}, the title's tags learnt together with a title/description "
        "triplet term",
        inference="The model tags a title alone, word by word (BIO tags); descriptions are read in training only. "
        "Its vectors are not trained for ranking and must not be used to compare rankings.",
        trainer="NerTrainer",
        script="recipes/ner/train.py",
        citation="""@misc{siskind_shah_multitask_triplet_ner,
  title  = {Multi-Task Triplet Loss for Named Entity Recognition using Supplementary Text},
  author = {Siskind, Ryan and Shah, Shalin}
}""",
        pipeline_tag="token-classification",
        library_name="transformers",
        supervised="on tagged titles",
        usage=USAGE,
        metrics={name: name.replace("_", " ").capitalize() for name in METRIC_NAMES},
        task_name="Named entity recognition",
        evaluation_description="On the held-out titles of {catalog}, in % (entity-level precision, recall and F1 "
        "with conlleval semantics, exact match of whole titles, token accuracy)",
    )
    config_class = NerConfig

    def __init__(
        self,
        model: str | PreTrainedModel,
        args: NerConfig | None = None,
        *positional,
        labels: Sequence[str] | None = None,
        loss: InBatchLoss | None = None,
        **kwargs,
    ) -> None:
        """Builds the metric term (unless given), then ``CatalogTrainer``.

        Args:
            model: an ``AutoModelForTokenClassification`` whose ``config.label2id`` holds the BIO
                labels, or any encoder's Hub id or folder, loaded as a tagger of ``labels``.
            args: default ``NerConfig``'s defaults, writing to ``<model>-ner``.
            labels: the BIO labels (``TaggedCatalog.labels``), needed when ``model`` is a name.
            loss: the metric term, any member of the loss family anchored on titles with
                descriptions as negatives (``ner.losses.title_description_loss``); default the one
                ``args`` configures.
            **kwargs: ``CatalogTrainer``'s, by name: ``train_dataset`` (``TaggedCatalog.train``),
                ``processing_class``, ``ranking_evaluator`` (a ``TaggingEvaluator``), ...
        """
        if isinstance(model, str):
            if labels is None:
                raise ValueError("A model given by name needs labels, the BIO tags it learns.")
            if kwargs.get("processing_class") is None:
                kwargs["processing_class"] = AutoTokenizer.from_pretrained(resolve_model_name(model))
            seed_before_loading(args)
            model = load_tagger(model, labels)
        self.metric_loss = loss
        super().__init__(model, args, *positional, **kwargs)

    def prepare_objective(self, model: PreTrainedModel, args: NerConfig) -> None:
        """The tagging forward on ``model``, its labels, and the metric term (unless given)."""
        enable_tagging_forward(model, description_field=self.fields[1])
        self.label2id = dict(model.config.label2id)
        if self.metric_loss is None:
            self.metric_loss = args.metric_loss()

    def build_collator(self, tokenizer, args: NerConfig) -> NerCollator:
        return NerCollator(
            tokenizer,
            fields=self.fields,
            max_length=args.max_length,
            seed=args.seed,
            label2id=self.label2id,
            descriptions=args.metric_weight > 0,
        )

    def compute_loss(self, model, inputs, return_outputs: bool = False, num_items_in_batch=None):
        args: NerConfig = self.args
        outputs = model(tagging_batch=inputs)
        loss = outputs["tagging_loss"]
        statistics = {"tagging_loss": loss.detach()}
        if args.metric_weight > 0:
            metric = self.metric_loss(outputs["title_embeddings"], outputs["description_embeddings"])
            loss = loss + args.metric_weight * metric.loss
            statistics[f"{self.metric_loss.name}_loss"] = metric.loss.detach()
            statistics.update(metric.statistics)
        self.record(statistics)
        return (loss, outputs) if return_outputs else loss

    def objective_card_section(self) -> str:
        return (
            "## Multi-task NER objective\n\n"
            f"`L = L_NER + metric_weight * L_{self.metric_loss.name}` on the titles' word tags and the mean-pooled "
            "title and description vectors, with:\n\n"
            + json_block({"metric_weight": self.args.metric_weight, **self.metric_loss.get_config_dict()})
            + f"\nLabels: {', '.join(self.label2id)}.\n"
        )
