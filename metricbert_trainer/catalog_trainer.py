"""``CatalogTrainer``: what every trainer of this package shares, whatever its objective.

MetricBERT and RecoBERT train on the same data (a catalog: one text column per field), report
the same way (one logged value per loss term and statistic, averaged over processes) and are
judged the same way (a ranking evaluator over the catalog instead of a held-out loss). This base
class holds that machinery once; a subclass brings its collator (``build_collator``), its
``compute_loss`` and the objective section of its model card.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from transformers import PreTrainedModel, Trainer, TrainingArguments

from .annotations import Annotations
from .catalog import Catalog
from .evaluation import RankingEvaluator as EmbeddingRankingEvaluator
from .modeling import freeze_mlm_head

RankingEvaluator = Callable[[PreTrainedModel, object], dict[str, float]]


class CatalogTrainer(Trainer):
    """A ``Trainer`` over catalog items with per-term logging and ranking evaluation.

    ``fields`` names the catalog's text columns in order (title first). Values passed to
    ``record`` during a step are averaged over the steps since the last log and over processes,
    and logged next to ``loss``. With a ``ranking_evaluator`` (a callable
    ``(model, tokenizer) -> {"mpr": ..., ...}``), ``evaluate()`` ranks the catalog and logs
    ``eval_mpr``, ``eval_mrr``, ``eval_hr@10``, ... so ``metric_for_best_model``,
    ``load_best_model_at_end`` and early stopping work on ranking quality.
    """

    # compute_loss returns the mean over one micro-batch; the base class divides it by the number
    # of accumulation steps, so N micro-batches of B items train like one batch of N*B.
    loss_is_scaled_for_ga = False

    def __init__(
        self,
        model: PreTrainedModel,
        args: TrainingArguments,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        data_collator=None,
        fields: Sequence[str] = ("title", "description"),
        ranking_evaluator: RankingEvaluator | None = None,
        **kwargs,
    ) -> None:
        if len(fields) != 2:
            raise ValueError(
                f"A training batch pairs exactly two fields (title and description); got {fields}."
            )
        self.fields = tuple(fields)
        if args.mlm_weight == 0:
            freeze_mlm_head(model)
        if data_collator is None:
            if processing_class is None:
                raise ValueError("Pass processing_class (the tokenizer) or a data_collator.")
            data_collator = self.build_collator(processing_class, args)
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

    def build_collator(self, tokenizer, args: TrainingArguments):
        """The collator used when none is passed: it turns catalog items into the model's inputs."""
        raise NotImplementedError(
            f"{type(self).__name__} must pass a data_collator or define build_collator."
        )

    @classmethod
    def default_ranking_evaluator(
        cls, catalog: Catalog, annotations: Annotations, args: TrainingArguments
    ) -> RankingEvaluator:
        """How the recipes evaluate this trainer's models: Metric_Inf over mean-pooled embeddings."""
        return EmbeddingRankingEvaluator(
            catalog=catalog,
            annotations=annotations,
            batch_size=args.per_device_eval_batch_size,
            max_length=args.max_length,
        )

    def objective_card_section(self) -> str:
        """Markdown appended to the model card, saying which objective trained the checkpoint."""
        return ""

    def _set_signature_columns_if_needed(self) -> None:
        # The model's forward does not name the text columns; keep them for the collator.
        if self._signature_columns is None:
            self._signature_columns = list(self.fields)

    def create_model_card(self, *args, **kwargs) -> None:
        """The stock card (hyperparameters, results), plus the objective's section, so a published
        checkpoint says exactly which loss trained it."""
        super().create_model_card(*args, **kwargs)
        section = self.objective_card_section()
        if not section or not self.is_world_process_zero():
            return
        with open(Path(self.args.output_dir) / "README.md", "a", encoding="utf-8") as handle:
            handle.write("\n" + section)

    @staticmethod
    def config_block(config: dict[str, object]) -> str:
        """A JSON code block of an objective's settings, for ``objective_card_section``."""
        return f"```json\n{json.dumps(config, indent=2)}\n```\n"

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

    def record(self, values: dict[str, float]) -> None:
        """Keeps a step's loss terms and statistics until the next log."""
        mode = "train" if self.model.training else "eval"
        for name, value in values.items():
            self._metrics[mode][name].append(value)

    def on_logged_means(self, means: dict[str, float]) -> None:
        """Called with the averaged recorded values at each log, for subclasses that watch them."""

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        mode = "train" if self.model.training else "eval"
        recorded = self._metrics[mode]
        if recorded:
            means = self._mean_across_processes(recorded)
            prefix = "" if mode == "train" else "eval_"
            logs = {**logs, **{f"{prefix}{name}": value for name, value in means.items()}}
            self.on_logged_means(means)
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
