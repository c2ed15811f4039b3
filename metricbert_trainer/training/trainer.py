"""``CatalogTrainer``: what every trainer of this package shares, whatever its objective.

MetricBERT and RecoBERT train on the same data (a catalog: one text column per field), report
the same way (one logged value per loss term and statistic, averaged over processes) and are
judged the same way (a ranking evaluator over the catalog instead of a held-out loss). This base
class holds that machinery once; a subclass brings its collator (``build_collator``), its
``compute_loss`` and the objective section of its model card.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from functools import cached_property
from pathlib import Path

import numpy as np
import torch
from transformers import AutoTokenizer, PreTrainedModel, Trainer, TrainingArguments, set_seed
from transformers.trainer_utils import get_last_checkpoint

from metricbert_trainer.base.attention import varying_shape_attention
from metricbert_trainer.base.checkpoints import StagedCheckpoints
from metricbert_trainer.base.collator import batch_slots
from metricbert_trainer.base.distributed import (
    gathered_in_rank_order,
    listed_in_shares,
    mean_by_name_across_processes,
    world_size,
)
from metricbert_trainer.base.dropout_masks import kernel_dropout_masks
from metricbert_trainer.base.fsdp2 import shard_with_tied_parameters_together
from metricbert_trainer.base.modeling import freeze_mlm_head, load_masked_lm, resolve_model_name, whole_copy
from metricbert_trainer.base.weight_ensembling import StartBlendCallback
from metricbert_trainer.data.annotations import Annotations
from metricbert_trainer.data.catalog import Catalog, degenerate_text_warnings
from metricbert_trainer.data.lengths import resolve_max_length, token_lengths
from metricbert_trainer.data.token_rows import TokenRows
from metricbert_trainer.evaluation.evaluator import RankingEvaluator, describe_evaluator
from metricbert_trainer.publishing.callbacks import PublishingCallback, default_publishing_callbacks
from metricbert_trainer.publishing.model_card import CardMethod, ModelCardInfo, usage_examples
from metricbert_trainer.publishing.saved_layout import (
    copy_masked_lm,
    has_masked_lm_checkpoint,
    split_encoder_and_masked_lm,
)
from metricbert_trainer.training.config import CatalogTrainerConfig

ModelEvaluator = Callable[[PreTrainedModel, object], dict[str, float]]

logger = logging.getLogger(__name__)
# The readable record of the training arguments saved beside the weights, instead of
# transformers' pickled training_args.bin (reading a pickle runs whatever code it names).
TRAINING_ARGUMENTS_FILE = "training_args.json"
PICKLED_TRAINING_ARGUMENTS_FILE = "training_args.bin"


class NonFiniteLossError(FloatingPointError):
    """A training step's loss was NaN or infinite (``nonfinite_loss: stop``)."""


def seed_before_loading(args: TrainingArguments | None) -> None:
    """Seeds every generator with the run's seed (the config's default without ``args``) before a
    trainer loads a model by name: the parts a checkpoint lacks (all-MiniLM-L6-v2's MLM head, a
    tagger's classifier) are drawn at load time, before ``Trainer`` seeds, so without this two
    runs of one config would start from different weights."""
    set_seed(args.seed if args is not None else TrainingArguments.seed)


class CatalogTrainer(StagedCheckpoints, Trainer):
    """A ``Trainer`` over catalog items with per-term logging and ranking evaluation.

    ``fields`` names the catalog's text columns in order (title first). Values passed to
    ``record`` during a step are averaged over the steps since the last log and over processes,
    and logged next to ``loss``. With a ``ranking_evaluator`` (a callable
    ``(model, tokenizer) -> {"mpr": ..., ...}``), ``evaluate()`` ranks the catalog and logs
    ``eval_mpr``, ``eval_mrr``, ``eval_hr@10``, ... so ``metric_for_best_model``,
    ``load_best_model_at_end`` and early stopping work on ranking quality.

    Faults lose nothing: checkpoints are published whole or not at all, and
    ``resume_from_checkpoint="last"`` restarts a killed run where it stopped
    (``checkpoints.StagedCheckpoints``); a step whose loss is not finite stops the run or is
    skipped and counted (``nonfinite_loss``). Every saved folder gets the publishing jobs'
    files (``publishing.callbacks``: model card, sentence-transformers files, loss plot), which
    are callbacks a user can drop or add to.
    """

    # Whether the recipes hold items out for label-free model selection (label_free): its signals
    # read mean-pooled field vectors, which is how this trainer's models rank.
    label_free_selection = False

    # What the model card says about the method (a subclass names its own, with its paper).
    card_method = CardMethod(
        name="A text encoder trained on a catalog",
        family="Catalog encoder",
        goal="so that items whose {fields} are alike embed close together",
        inference="Items are embedded by mean pooling the last layer and recommended by distance.",
        trainer="CatalogTrainer",
    )

    # Whether the trained model is a sentence encoder, saved with the sentence-transformers files
    # that load it as one (a tagger is not: its card and folder say how to use it instead).
    sentence_encoder = True

    # The configuration built when a trainer is given no args (a subclass names its own).
    config_class: type[CatalogTrainerConfig] = CatalogTrainerConfig

    # compute_loss returns the mean over one micro-batch; the base class divides it by the number
    # of accumulation steps, so N micro-batches of B items train like one batch of N*B.
    loss_is_scaled_for_ga = False

    def __init__(
        self,
        model: str | PreTrainedModel,
        args: TrainingArguments | None = None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        data_collator=None,
        fields: Sequence[str] = ("title", "description"),
        ranking_evaluator: ModelEvaluator | None = None,
        model_card_info: ModelCardInfo | None = None,
        **kwargs,
    ) -> None:
        model, args, processing_class = self.resolve_model_and_args(model, args, processing_class)
        self.fields = tuple(fields)
        self.prepare_objective(model, args)
        # The names of an item's two texts in a batch (collator.batch_slots).
        self.batch_fields = batch_slots(self.fields)
        self.model_card_info = model_card_info or ModelCardInfo(text_fields=self.fields)
        first_item = next(iter(train_dataset), None) if train_dataset is not None else None
        if not self.model_card_info.examples and first_item is not None:
            # The card's usage snippets encode a real item of the catalog the model was trained on.
            self.model_card_info = dataclasses.replace(
                self.model_card_info, examples=usage_examples(first_item, self.fields)
            )
        if args.mlm_weight == 0:
            freeze_mlm_head(model)
        if args.max_length is None:
            resolve_max_length(args, processing_class, train_dataset, self.fields, model)
        if data_collator is None:
            if processing_class is None:
                raise ValueError("Pass processing_class (the tokenizer) or a data_collator.")
            data_collator = self.build_collator(processing_class, args)
        self.ranking_evaluator = ranking_evaluator
        self.nonfinite_losses_skipped = 0
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
        for job in default_publishing_callbacks(self.sentence_encoder):
            if not any(isinstance(callback, type(job)) for callback in self.callback_handler.callbacks):
                self.add_callback(job)
        if args.nonfinite_loss == "skip" and self.is_deepspeed_enabled:
            raise ValueError(
                "nonfinite_loss=skip cannot be honoured under DeepSpeed, whose engine steps the optimizer inside "
                "backward; use nonfinite_loss=stop."
            )
        if train_dataset is not None:
            self._check_training_catalog(train_dataset)
        if args.trained_weight_share < 1:
            self.add_callback(
                StartBlendCallback(self.starting_encoder_copy(model), args.trained_weight_share)
            )

    def _check_training_catalog(self, train_dataset) -> None:
        """Says what a catalog too small for the batch, texts longer than ``max_length``, or texts
        that give the pairs nothing to learn (``degenerate_text_warnings``) do to training, before
        it starts rather than never."""
        batch = self.args.per_device_train_batch_size * self.args.world_size
        if len(train_dataset) < 2:
            raise ValueError(
                f"The training catalog has {len(train_dataset)} item(s); in-batch training needs at least 2."
            )
        if len(train_dataset) < batch:
            logger.warning(
                "The training catalog has %d items, fewer than one batch (%d): every step trains on all of them.",
                len(train_dataset),
                batch,
            )
        if self.processing_class is not None:
            tokens = self.training_token_rows  # by every process, which tokenize a share each
        if not self.is_world_process_zero():
            return
        texts = {name: train_dataset[name][:] for name in self.fields}
        for warning in degenerate_text_warnings(texts):
            logger.warning("The training catalog: %s.", warning)
        if self.processing_class is None:
            return
        for name in self.fields:
            # Only a text that fills max_length may have been cut: the others are counted whole.
            filled = np.flatnonzero(tokens[name].lengths == self.args.max_length)
            whole = token_lengths(self.processing_class, [texts[name][row] for row in filled])
            truncated = int((whole > self.args.max_length).sum())
            if truncated:
                logger.warning(
                    "%d of %d %s texts are longer than max_length=%d tokens and are truncated.",
                    truncated,
                    len(train_dataset),
                    name,
                    self.args.max_length,
                )

    @cached_property
    def training_token_rows(self) -> dict[str, TokenRows]:
        """The training catalog's token ids per field, as the collator truncates them, tokenized
        once for everything that reads them before the first step (``data.token_rows``), each
        process a share of them: every process must first ask for them at the same point."""
        return {
            name: shared_token_rows(
                self.processing_class, self.train_dataset[name][:], self.args.max_length, self.args.device
            )
            for name in self.fields
        }

    @classmethod
    def resolve_model_and_args(
        cls, model: str | PreTrainedModel, args: TrainingArguments | None, processing_class=None
    ) -> tuple[PreTrainedModel, TrainingArguments, object]:
        """What the trainer is given, completed the way trl's and sentence-transformers' trainers
        complete it: a model named by its Hub id or folder is loaded (``load_masked_lm``) with its
        tokenizer unless ``processing_class`` is given, a loaded model without ``processing_class``
        gets the tokenizer of the folder it came from, and missing ``args`` are ``config_class``'s
        defaults, writing to ``<model>-<method>`` in the working folder."""
        if isinstance(model, str):
            path = resolve_model_name(model)
            if processing_class is None:
                processing_class = AutoTokenizer.from_pretrained(path)
            seed_before_loading(args)
            model = load_masked_lm(path)
        elif processing_class is None and model.config.name_or_path:
            # As trl does: the tokenizer saved beside the model's weights, when there is one.
            try:
                processing_class = AutoTokenizer.from_pretrained(model.config.name_or_path)
            except OSError:
                processing_class = None
        if args is None:
            name = Path(model.config.name_or_path or "model").name
            method = cls.__name__.removesuffix("Trainer").lower()
            args = cls.config_class(output_dir=f"{name}-{method}")
        return model, args, processing_class

    def prepare_objective(self, model: PreTrainedModel, args: TrainingArguments) -> None:
        """Sets up what the family's ``compute_loss`` needs (its loss, the model's extra forward, a
        frozen guide), once the model and args are resolved and before ``Trainer`` wraps them."""

    def build_collator(self, tokenizer, args: TrainingArguments):
        """The collator used when none is passed: it turns catalog items into the model's inputs."""
        raise NotImplementedError(
            f"{type(self).__name__} must pass a data_collator or define build_collator."
        )

    @classmethod
    def default_ranking_evaluator(
        cls, catalog: Catalog, annotations: Annotations, args: TrainingArguments
    ) -> ModelEvaluator:
        """How the recipes evaluate this trainer's models: Metric_Inf over mean-pooled embeddings."""
        return RankingEvaluator(
            catalog=catalog,
            annotations=annotations,
            batch_size=args.per_device_eval_batch_size,
            max_length=args.max_length,
        )

    def objective_card_section(self) -> str:
        """Markdown appended to the model card, saying which objective trained the checkpoint."""
        return ""

    def create_model_card(self, model_name: str | None = None, **kwargs) -> None:
        """Writes the model card to the output folder (``push_to_hub`` calls this before uploading).

        The card is this package's (``model_card``), not transformers' generic one; the keyword
        arguments transformers passes (``language``, ``tags``, ...) are not used.
        """
        if self.is_world_process_zero():
            self.write_publishing_files(self.args.output_dir, model_name=model_name)

    def write_publishing_files(self, folder: str | Path, model_name: str | None = None) -> None:
        """What makes ``folder`` a publishable model beside its weights: the files of every
        publishing callback (``publishing.callbacks``)."""
        for callback in self.callback_handler.callbacks:
            if isinstance(callback, PublishingCallback):
                callback.on_model_folder(Path(folder), self, model_name=model_name)

    # Override: every save (checkpoints and the final model) gets the saved layout and the
    # publishing files, so any folder loads with sentence-transformers and says how it was trained.
    def _save(self, output_dir: str | None = None, state_dict=None) -> None:
        super()._save(output_dir, state_dict=state_dict)
        if not self.args.should_save:
            return
        folder = Path(output_dir if output_dir is not None else self.args.output_dir)
        if self.sentence_encoder and has_masked_lm_checkpoint(folder):
            # The encoder on top for AutoModel and SentenceTransformer, the masked-LM model in masked_lm/
            # (a tagger stays whole at the top, where pipeline("token-classification") reads it).
            split_encoder_and_masked_lm(folder, start=self.model.name_or_path)
        (folder / PICKLED_TRAINING_ARGUMENTS_FILE).unlink(missing_ok=True)
        (folder / TRAINING_ARGUMENTS_FILE).write_text(self.args.to_json_string(), encoding="utf-8")
        self.write_publishing_files(folder)

    def train(self, resume_from_checkpoint: str | bool | None = None, trial=None, **kwargs):
        """``Trainer.train`` (resuming as ``StagedCheckpoints`` does), its CPU dropout masks drawn by
        ``cpu_dropout_masks``; with ``trained_weight_share`` below 1 a ``StartBlendCallback`` blends
        the encoder with its start when it ends."""
        # Everything that reads the catalog's token ids has read them: at a million items of 256
        # tokens they would hold 1 GiB for the rest of the run (tokenized again if asked for).
        vars(self).pop("training_token_rows", None)
        with self.cpu_dropout_masks():
            return super().train(resume_from_checkpoint=resume_from_checkpoint, trial=trial, **kwargs)

    def cpu_dropout_masks(self) -> contextlib.AbstractContextManager:
        """On a CPU, the model's dropout masks (PyTorch's own) drawn by the compiled kernel for the
        passes inside the block (``base.dropout_masks.kernel_dropout_masks``); elsewhere as PyTorch draws them."""
        if self.args.device.type != "cpu":
            return contextlib.nullcontext()
        return kernel_dropout_masks(self.model)

    def create_optimizer(self, model=None) -> torch.optim.Optimizer:
        """``Trainer.create_optimizer``; under FSDP2 the model is sharded first, with its tied
        parameters in one group (``fsdp2.shard_with_tied_parameters_together``)."""
        if self.accelerator.is_fsdp2:
            shard_with_tied_parameters_together(self.model, self.accelerator)
        return super().create_optimizer(model)

    def starting_encoder_copy(self, model: PreTrainedModel) -> torch.nn.Module:
        """A whole, frozen copy of the encoder before training, for ``trained_weight_share``."""
        return whole_copy(model.base_model).requires_grad_(False)

    def training_step(self, model, inputs, num_items_in_batch=None) -> torch.Tensor:
        with varying_shape_attention(self.args.device):
            loss = super().training_step(model, inputs, num_items_in_batch)
        finite = torch.isfinite(loss.detach()).all().float()
        if self.accelerator.num_processes > 1:
            # Every process must take the same decision: the gradients were all-reduced already.
            finite = self.accelerator.reduce(finite, reduction="sum") == self.accelerator.num_processes
        if bool(finite):
            return loss
        step = self.state.global_step + 1
        if self.args.nonfinite_loss == "stop":
            checkpoint = (
                get_last_checkpoint(self.args.output_dir) if Path(self.args.output_dir).is_dir() else None
            )
            saved = (
                f"The last checkpoint, {checkpoint}, is intact"
                if checkpoint
                else f"No checkpoint was saved in {self.args.output_dir} before it"
            )
            raise NonFiniteLossError(
                f"The loss of training step {step} is {float(loss):g}. {saved}; lower the learning rate or check the "
                "data, or set nonfinite_loss=skip to drop such steps."
            )
        # The gradients accumulated in this optimizer step are dropped; the optimizer leaves
        # parameters without a gradient as they are.
        model.zero_grad(set_to_none=True)
        self.nonfinite_losses_skipped += 1
        logger.warning(
            "Training step %d: the loss is %g; its gradients are dropped (%d skipped so far).",
            step,
            float(loss),
            self.nonfinite_losses_skipped,
        )
        return loss

    # Override: transformers copies only the weights and config from the checkpoint to the output
    # folder before uploading it; the publishing files and the masked-LM model must be there too.
    def _push_from_checkpoint(self, checkpoint_folder: str) -> None:
        if self.is_world_process_zero():
            self.write_publishing_files(self.args.output_dir)
            copy_masked_lm(checkpoint_folder, self.args.output_dir)
        super()._push_from_checkpoint(checkpoint_folder)

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
        # On a CPU an evaluation encodes the catalog for minutes, before the first step too
        # (eval_on_start): it says what it does, and when it is done.
        step = self.state.global_step
        logger.info("Evaluation at step %d: %s.", step, describe_evaluator(self.ranking_evaluator))
        started = time.perf_counter()
        ranking = self.ranking_evaluator(self.accelerator.unwrap_model(self.model), self.processing_class)
        logger.info("Evaluation at step %d done in %.1f s.", step, time.perf_counter() - started)
        ranking = {f"{metric_key_prefix}_{name}": value for name, value in ranking.items()}
        metrics.update(ranking)
        self.log(ranking)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics

    def record(self, values: dict[str, float | torch.Tensor]) -> None:
        """Keeps a step's loss terms and statistics until the next log.

        A tensor value stays on its device (in float64, as a Python float would average) and is
        read once, at the log: reading it every step would make the host wait for the device
        each time, a pipeline stall per statistic on a GPU.
        """
        mode = "train" if self.model.training else "eval"
        for name, value in values.items():
            if isinstance(value, torch.Tensor):
                value = value.detach().to(torch.float64)
            self._metrics[mode][name].append(value)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        mode = "train" if self.model.training else "eval"
        recorded = self._metrics[mode]
        # Every process takes part in the averaging, also one that recorded nothing this time:
        # the names are agreed across processes (distributed.mean_by_name_across_processes).
        means = mean_by_name_across_processes(local_means(recorded), self.args.device)
        if means:
            prefix = "" if mode == "train" else "eval_"
            means = {name: round(value, 6) for name, value in means.items()}
            logs = {**logs, **{f"{prefix}{name}": value for name, value in means.items()}}
        recorded.clear()
        if mode == "train" and self.nonfinite_losses_skipped:
            logs = {**logs, "nonfinite_losses_skipped": self.nonfinite_losses_skipped}
        super().log(logs, start_time)


def local_means(recorded: dict[str, list[float | torch.Tensor]]) -> dict[str, float]:
    """Each recorded name's mean over its values, as floats; the device values are read in one
    transfer."""
    means = {name: sum(values) / len(values) for name, values in recorded.items() if values}
    on_device = {name: mean for name, mean in means.items() if isinstance(mean, torch.Tensor)}
    if on_device:
        device = next(iter(on_device.values())).device
        read = torch.stack([mean.to(device) for mean in on_device.values()]).tolist()
        means.update(zip(on_device, read, strict=True))
    return means


def shared_token_rows(
    tokenizer, texts: Sequence[str], max_length: int, device: torch.device | str
) -> TokenRows:
    """``TokenRows.tokenize(tokenizer, texts, max_length)`` on every process of a launch, each
    process tokenizing a contiguous share: the counts gathered by ``listed_in_shares``, the ids by
    ``gathered_in_rank_order`` (through ``device``). Every process must call this with the same
    texts at the same point. Every process tokenized every text before: about 19 minutes for ten
    million items' 20 million wine texts (116 s per two million on two cores, projected), longer
    texts longer, in each process however many shared the run."""
    processes = world_size()
    if processes == 1 or len(texts) < processes:
        return TokenRows.tokenize(tokenizer, texts, max_length)
    own = []

    def own_lengths(rows: torch.Tensor) -> torch.Tensor:
        own.append(TokenRows.tokenize(tokenizer, texts[int(rows[0]) : int(rows[-1]) + 1], max_length))
        return torch.from_numpy(own[0].lengths.astype(np.int32))[:, None]

    lengths = listed_in_shares(own_lengths, len(texts), device)[:, 0].numpy()
    return TokenRows.from_lengths(gathered_in_rank_order(own[0].ids, device), lengths)
