"""``MetricBertTrainer``: the Hugging Face Trainer with MetricBERT's MLM + triplet loss."""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import PreTrainedModel, Trainer

from .collator import MetricBertCollator
from .config import MetricBertConfig
from .guide import StartingModelGuide
from .losses import build_loss, embedding_spread
from .modeling import enable_metric_forward

logger = logging.getLogger(__name__)

RankingEvaluator = Callable[[PreTrainedModel, object], dict[str, float]]


class MetricBertTrainer(Trainer):
    """Trains an ``AutoModelForMaskedLM`` with ``L = mlm_weight * L_MLM + triplet_weight * L_T``.

    The training data is a catalog (a ``datasets.Dataset`` with one column per text field); the
    default collator tokenizes and masks those fields. Each step logs ``mlm_loss``,
    ``triplet_loss`` (``<objective>_loss`` for another ``MetricBertConfig.objective``), the
    mining statistics and the batch's embedding spread next to ``loss``.
    With a ``ranking_evaluator`` (see ``metricbert_trainer.evaluation``), ``evaluate()`` ranks the
    catalog and logs ``eval_mpr``, ``eval_mrr``, ``eval_hr@10``, ... so ``metric_for_best_model``,
    ``load_best_model_at_end`` and early stopping work on ranking quality.
    """

    # compute_loss returns the mean over one micro-batch; the base class divides it by the number
    # of accumulation steps, so N micro-batches of B items train like one batch of N*B.
    loss_is_scaled_for_ga = False
    _tag_names = ["metricbert", "sentence-similarity", "metric-learning"]

    def __init__(
        self,
        model: PreTrainedModel,
        args: MetricBertConfig,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        data_collator=None,
        fields: tuple[str, str] = ("title", "description"),
        ranking_evaluator: RankingEvaluator | None = None,
        **kwargs,
    ) -> None:
        if len(fields) != 2:
            raise ValueError(
                f"A training batch pairs exactly two fields (anchor and positive); got {fields}."
            )
        self.fields = tuple(fields)
        if data_collator is None:
            if processing_class is None:
                raise ValueError("Pass processing_class (the tokenizer) or a data_collator.")
            data_collator = MetricBertCollator(
                processing_class,
                fields=self.fields,
                max_length=args.max_length,
                mlm_probability=args.mlm_probability,
            )
        self.guide = (
            StartingModelGuide(model) if args.false_negative_filter or args.guide_diagnostics else None
        )
        enable_metric_forward(model)
        self.metric_loss = build_loss(args)
        self.ranking_evaluator = ranking_evaluator
        self._metrics: dict[str, dict[str, list[float]]] = {
            "train": defaultdict(list),
            "eval": defaultdict(list),
        }
        # The base class refuses an eval_strategy without an eval_dataset; ranking evaluation needs
        # none (it ranks the catalog), so the check is skipped for the duration of its __init__.
        eval_strategy = args.eval_strategy
        if ranking_evaluator is not None and eval_dataset is None:
            args.eval_strategy = "no"
        try:
            super().__init__(
                model=model,
                args=args,
                train_dataset=train_dataset,
                eval_dataset=eval_dataset,
                processing_class=processing_class,
                data_collator=data_collator,
                **kwargs,
            )
        finally:
            args.eval_strategy = eval_strategy

    def _set_signature_columns_if_needed(self) -> None:
        # The model's forward does not name the text columns; keep them for the collator.
        if self._signature_columns is None:
            self._signature_columns = list(self.fields)

    def compute_loss(self, model, inputs, return_outputs: bool = False, num_items_in_batch=None):
        args: MetricBertConfig = self.args
        outputs = model(metric_batch=inputs, fields=self.fields, pooling_input=args.pooling_input)
        titles, descriptions = outputs["embeddings"][0], outputs["embeddings"][1]
        guide_vectors = excluded = None
        if self.guide is not None and (args.false_negative_filter or self._is_logging_step()):
            guide_vectors = self.guide.embed(inputs, self.fields)
        if args.false_negative_filter:
            anchor_index, positive_index = self.metric_loss.anchors_and_positives(len(titles), titles.device)
            excluded = self.guide.closer_than_positive(guide_vectors, anchor_index, positive_index)
        metric = self.metric_loss(titles, descriptions, excluded)
        loss = args.triplet_weight * metric.loss
        if args.mlm_weight > 0:
            loss = loss + args.mlm_weight * outputs["mlm_loss"]
        statistics = {
            "mlm_loss": float(outputs["mlm_loss"].detach()),
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
        self._record(statistics)
        return (loss, outputs) if return_outputs else loss

    def _is_logging_step(self) -> bool:
        """Whether the update this micro-batch belongs to will be logged (or is the first)."""
        every = max(int(self.state.logging_steps or 1), 1)
        return self.state.global_step == 0 or (self.state.global_step + 1) % every == 0

    def create_model_card(self, *args, **kwargs) -> None:
        """The stock card (hyperparameters, results), plus the objective's settings as JSON, so a
        published checkpoint says exactly which loss trained it."""
        super().create_model_card(*args, **kwargs)
        if not self.is_world_process_zero():
            return
        card = Path(self.args.output_dir) / "README.md"
        objective = json.dumps(self.args.loss_config(), indent=2)
        with open(card, "a", encoding="utf-8") as handle:
            handle.write(
                "\n## MetricBERT objective\n\n"
                f"`L = mlm_weight * L_MLM + triplet_weight * L_{self.metric_loss.name}`, with:\n\n"
                f"```json\n{objective}\n```\n"
            )

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        # The only thing to predict on held-out items is the loss; rankings come from evaluate().
        with torch.no_grad(), self.compute_loss_context_manager():
            loss = self.compute_loss(model, inputs)
        return loss.detach(), None, None

    def evaluate(
        self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval"
    ) -> dict[str, float]:
        if self.ranking_evaluator is None:
            return super().evaluate(
                eval_dataset, ignore_keys=ignore_keys, metric_key_prefix=metric_key_prefix
            )
        metrics = {}
        if eval_dataset is not None or self.eval_dataset is not None:
            metrics.update(
                super().evaluate(eval_dataset, ignore_keys=ignore_keys, metric_key_prefix=metric_key_prefix)
            )
        ranking = self.ranking_evaluator(self.accelerator.unwrap_model(self.model), self.processing_class)
        ranking = {f"{metric_key_prefix}_{name}": value for name, value in ranking.items()}
        metrics.update(ranking)
        self.log(ranking)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics

    def _record(self, values: dict[str, float]) -> None:
        mode = "train" if self.model.training else "eval"
        for name, value in values.items():
            self._metrics[mode][name].append(value)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        mode = "train" if self.model.training else "eval"
        recorded = self._metrics[mode]
        if recorded:
            means = self._mean_across_processes(recorded)
            prefix = "" if mode == "train" else "eval_"
            logs = {**logs, **{f"{prefix}{name}": value for name, value in means.items()}}
            self._warn_on_collapse(means)
            recorded.clear()
        super().log(logs, start_time)

    def _mean_across_processes(self, recorded: dict[str, list[float]]) -> dict[str, float]:
        names = sorted(recorded)
        local = torch.tensor(
            [sum(recorded[name]) / len(recorded[name]) for name in names], device=self.args.device
        )
        merged = (
            self.accelerator.reduce(local, reduction="mean") if self.accelerator.num_processes > 1 else local
        )
        return {name: round(float(value), 6) for name, value in zip(names, merged.tolist(), strict=True)}

    def _warn_on_collapse(self, means: dict[str, float]) -> None:
        spread = means.get("embedding_spread")
        if spread is not None and spread < self.args.collapse_warning_spread:
            logger.warning(
                "Embedding spread %.4f is below %.4f: the batch's embeddings are collapsing onto one direction. "
                "Lower the learning rate or the MLM weight, or try negative_pool: other_field.",
                spread,
                self.args.collapse_warning_spread,
            )
