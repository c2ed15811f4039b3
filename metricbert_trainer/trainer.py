"""``MetricBertTrainer``: the Hugging Face Trainer with MetricBERT's MLM + triplet loss."""

from __future__ import annotations

import logging

import torch
from transformers import PreTrainedModel

from .catalog_trainer import CatalogTrainer
from .collator import MetricBertCollator
from .config import MetricBertConfig
from .distributed import gather_with_grad, share_of_global_mean, world_size
from .guide import StartingModelGuide
from .losses import build_loss, embedding_spread
from .modeling import enable_metric_forward

logger = logging.getLogger(__name__)


class MetricBertTrainer(CatalogTrainer):
    """Trains an ``AutoModelForMaskedLM`` with ``L = mlm_weight * L_MLM + triplet_weight * L_T``.

    The training data is a catalog (a ``datasets.Dataset`` with one column per text field); the
    default collator tokenizes and masks those fields. Each step logs ``mlm_loss``,
    ``triplet_loss`` (``<objective>_loss`` for another ``MetricBertConfig.objective``), the
    mining statistics and the batch's embedding spread next to ``loss``. Ranking evaluation,
    logging across processes and the model card come from ``CatalogTrainer``.

    With several processes (DDP, DeepSpeed, FSDP) and ``gather_across_devices``, the pooled
    embeddings of every process are gathered and each process's anchors mine the global batch;
    the loss is weighted so that training equals one process on the whole batch
    (``distributed``).
    """

    _tag_names = ["metricbert", "sentence-similarity", "metric-learning"]
    card_method = "A MetricBERT encoder (Malkiel, Ginzburg et al., *MetricBERT*, ICASSP 2022)"

    def __init__(self, model: PreTrainedModel, args: MetricBertConfig, *positional, **kwargs) -> None:
        """Takes ``CatalogTrainer``'s arguments (``train_dataset``, ``processing_class``, ``fields``,
        ``ranking_evaluator``, ...); the loss and the guide are built from ``args``."""
        self.guide = (
            StartingModelGuide(model) if args.false_negative_filter or args.guide_diagnostics else None
        )
        enable_metric_forward(model)
        self.metric_loss = build_loss(args)
        super().__init__(model, args, *positional, **kwargs)

    def build_collator(self, tokenizer, args: MetricBertConfig) -> MetricBertCollator:
        return MetricBertCollator(
            tokenizer,
            fields=self.fields,
            max_length=args.max_length,
            mlm_probability=args.mlm_probability,
            seed=args.seed,
        )

    def compute_loss(self, model, inputs, return_outputs: bool = False, num_items_in_batch=None):
        args: MetricBertConfig = self.args
        outputs = model(metric_batch=inputs, fields=self.batch_fields, pooling_input=args.pooling_input)
        embeddings, shard = outputs["embeddings"], None
        if self.gathers_across_processes:
            embeddings, shard = gather_with_grad(embeddings, dim=1)
        titles, descriptions = embeddings[0], embeddings[1]
        guide_vectors = excluded = None
        if self.guide is not None and (args.false_negative_filter or self._is_logging_step()):
            # The guide is not part of the prepared model, so it gets the run's mixed precision here.
            with self.accelerator.autocast():
                guide_vectors = self.guide.embed(inputs, self.batch_fields).float()
            if shard is not None:
                # [titles; descriptions] of this process -> the same layout over the global batch.
                local = guide_vectors.view(2, -1, guide_vectors.shape[-1])
                guide_vectors = gather_with_grad(local, dim=1)[0].flatten(0, 1)
        if args.false_negative_filter:
            anchor_index, positive_index = self.metric_loss.anchors_and_positives(
                len(titles), titles.device, shard
            )
            excluded = self.guide.closer_than_positive(guide_vectors, anchor_index, positive_index)
        metric = self.metric_loss(titles, descriptions, excluded, shard)
        loss = args.triplet_weight * metric.loss
        mlm_loss = outputs["mlm_loss"]
        if shard is not None:
            # Per masked token of every process; its mean over processes (as logged) is that mean.
            mlm_loss = share_of_global_mean(mlm_loss * outputs["mlm_tokens"], outputs["mlm_tokens"], shard)
        if args.mlm_weight > 0:
            loss = loss + args.mlm_weight * mlm_loss
        statistics = {
            "mlm_loss": float(mlm_loss.detach()),
            f"{self.metric_loss.name}_loss": float(metric.loss.detach()),
            "embedding_spread": embedding_spread(torch.cat([titles, descriptions])),
            **metric.statistics,
        }
        if excluded is not None:
            statistics["filtered_candidate_rate"] = float(excluded.float().mean())
        if guide_vectors is not None and len(metric.anchor_index):
            statistics["guide_negative_closer_rate"] = self.guide.negative_closer_rate(
                guide_vectors, metric.anchor_index, metric.positive_index, metric.negative_index
            )
        self.record(statistics)
        return (loss, outputs) if return_outputs else loss

    @property
    def gathers_across_processes(self) -> bool:
        """Whether negatives are mined from the batch of every process (``gather_across_devices``)."""
        return self.args.gather_across_devices and world_size() > 1

    def _is_logging_step(self) -> bool:
        """Whether the update this micro-batch belongs to will be logged (or is the first)."""
        every = max(int(self.state.logging_steps or 1), 1)
        return self.state.global_step == 0 or (self.state.global_step + 1) % every == 0

    def objective_card_section(self) -> str:
        return (
            "## MetricBERT objective\n\n"
            f"`L = mlm_weight * L_MLM + triplet_weight * L_{self.metric_loss.name}`, with:\n\n"
            + self.config_block(self.args.loss_config())
        )

    def on_logged_means(self, means: dict[str, float]) -> None:
        spread = means.get("embedding_spread")
        if spread is not None and spread < self.args.collapse_warning_spread:
            logger.warning(
                "Embedding spread %.4f is below %.4f: the batch's embeddings are collapsing onto one direction. "
                "Lower the learning rate or the MLM weight, or try negative_pool: other_field.",
                spread,
                self.args.collapse_warning_spread,
            )
