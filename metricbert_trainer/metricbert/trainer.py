"""``MetricBertTrainer``: the Hugging Face Trainer with MetricBERT's MLM + triplet loss."""

from __future__ import annotations

import logging

import torch
from torch.utils.data import DataLoader
from transformers import PreTrainedModel

from metricbert_trainer.base.attention import leave_attention_dropout_off
from metricbert_trainer.base.checkpoints import checkpoint_to_resume
from metricbert_trainer.base.distributed import (
    gather_field_major,
    gather_with_grad,
    world_size,
)
from metricbert_trainer.base.gradient_norms import term_gradient_norms
from metricbert_trainer.base.length_groups import length_groups_on
from metricbert_trainer.metricbert.collapse_warning import CollapseWarningCallback
from metricbert_trainer.metricbert.collator import MetricBertCollator
from metricbert_trainer.metricbert.config import MetricBertConfig
from metricbert_trainer.metricbert.forward import enable_metric_forward
from metricbert_trainer.metricbert.guide import StartingModelGuide
from metricbert_trainer.metricbert.losses import InBatchLoss, build_loss, embedding_spread
from metricbert_trainer.metricbert.mlm_warmup import MlmHeadWarmup
from metricbert_trainer.metricbert.neighbourhood_batches import (
    NeighbourhoodSampler,
)
from metricbert_trainer.metricbert.setup import TrainingSetup
from metricbert_trainer.metricbert.terms import MlmTerm, StepVectors, TeacherParts, build_terms
from metricbert_trainer.publishing.markdown import json_block
from metricbert_trainer.publishing.model_card import CardMethod
from metricbert_trainer.training.trainer import CatalogTrainer

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
    label_free_selection = True
    card_method = CardMethod(
        name="A MetricBERT encoder (Malkiel, Ginzburg et al., *MetricBERT*, ICASSP 2022)",
        family="MetricBERT",
        goal="so that items whose {fields} are alike embed close together",
        inference="Items are embedded by mean pooling the last layer and recommended by distance: MetricBERT's "
        "Metric_Inf sums the angular distances of the two fields, a single text is compared by cosine.",
        trainer="MetricBertTrainer",
        script="recipes/metricbert/train.py",
        citation="""@inproceedings{malkiel2022metricbert,
  title     = {MetricBERT: Text Representation Learning via Self-Supervised Triplet Training},
  author    = {Malkiel, Itzik and Ginzburg, Dvir and Barkan, Oren and Caciularu, Avi and Weill, Yoni and Koenigstein, Noam},
  booktitle = {ICASSP 2022 - 2022 IEEE International Conference on Acoustics, Speech and Signal Processing (ICASSP)},
  year      = {2022}
}""",
    )

    config_class = MetricBertConfig

    def __init__(
        self,
        model: str | PreTrainedModel,
        args: MetricBertConfig | None = None,
        *positional,
        loss: InBatchLoss | None = None,
        **kwargs,
    ) -> None:
        """``CatalogTrainer`` with MetricBERT's objective: the loss (unless given) and the
        false-negative guide come from ``args`` (``prepare_objective``).

        Args:
            model: an ``AutoModelForMaskedLM`` or its Hub id or folder (loaded with its tokenizer).
            args: the training arguments and the loss; default ``MetricBertConfig``'s defaults,
                writing to ``<model>-metricbert``.
            loss: the metric-learning term, any member of the loss family
                (``metricbert_trainer.metricbert.losses``, e.g. ``TripletLoss(margin=0.2)``, or
                ``TripletLoss(guide=StartingModelGuide(model))`` to filter false negatives);
                default the one ``args`` configures (``objective``, ``margin``, ``mining``,
                ``false_negative_filter``, ...). Its own settings then replace those of ``args``
                in the model card, and its guide also serves ``distill_weight`` and the
                diagnostics.
            **kwargs: ``CatalogTrainer``'s, by name: ``train_dataset`` (one column per text field),
                ``processing_class``, ``fields`` (title first), ``ranking_evaluator``, ...

        Example:
            >>> from metricbert_trainer import MetricBertTrainer, load_catalog
            >>> catalog = load_catalog("data/wines/winemag-sample-5811.csv")
            >>> trainer = MetricBertTrainer("sentence-transformers/all-MiniLM-L6-v2", train_dataset=catalog.dataset)
            >>> trainer.train()
        """
        self.metric_loss = loss
        self.mlm_head_warmup: MlmHeadWarmup | None = None
        self.teacher_parts = TeacherParts()
        self.neighbourhood_sampler: NeighbourhoodSampler | None = None
        super().__init__(model, args, *positional, **kwargs)
        if self.args.collapse_warning_spread > 0:
            self.add_callback(CollapseWarningCallback(self.args.collapse_warning_spread))
        if self.args.batch_neighbourhood_size and self.guide is None:
            raise ValueError(
                "batch_neighbourhood_size groups items by the frozen starting model's vectors, the guide's: "
                "turn on false_negative_filter, distill_weight, teacher_weight or guide_diagnostics."
            )
        if self.args.log_gradient_norms and (
            world_size() > 1 or self.is_deepspeed_enabled or self.is_fsdp_enabled
        ):
            raise ValueError(
                "log_gradient_norms measures the whole gradients of one process; run it without DDP, DeepSpeed "
                "or FSDP (a measurement run on one device says the same about the balance)."
            )

    def prepare_objective(self, model: PreTrainedModel, args: MetricBertConfig) -> None:
        """The metric forward on ``model``, the false-negative guide and the loss (unless given)."""
        enable_metric_forward(model)
        # One frozen starting model serves the loss's false-negative filter, the distillation
        # guard, the hybrid teacher and the diagnostics: a given loss's own guide, else one built when anything needs it.
        given = self.metric_loss
        self.guide = given.guide if given is not None else None
        if self.guide is None and (
            (given is None and args.false_negative_filter)
            or args.guide_diagnostics
            or args.distill_weight > 0
            or args.teacher_weight > 0
        ):
            self.guide = StartingModelGuide(model)
        if given is None:
            self.metric_loss = build_loss(args, guide=self.guide)
        self.loss_terms = build_terms(args, self.metric_loss, self.teacher_parts)

    def starting_encoder_copy(self, model: PreTrainedModel) -> torch.nn.Module:
        """The guide's frozen encoder when there is a guide: it is the same copy, held once."""
        return self.guide.encoder if self.guide is not None else super().starting_encoder_copy(model)

    def build_collator(self, tokenizer, args: MetricBertConfig) -> MetricBertCollator:
        return MetricBertCollator(
            tokenizer,
            fields=self.fields,
            max_length=args.max_length,
            mlm_probability=args.mlm_probability,
            seed=args.seed,
        )

    def training_step(self, model, inputs, num_items_in_batch=None) -> torch.Tensor:
        """``CatalogTrainer.training_step``. With ``attention_dropout`` false, ``compute_loss``
        leaves the self-attention blocks in eval mode for the step's forward and its backward pass,
        where gradient checkpointing runs the forward again; they return to train mode after it."""
        loss = super().training_step(model, inputs, num_items_in_batch)
        if not self.args.attention_dropout:
            model.train()
        return loss

    def compute_loss(self, model, inputs, return_outputs: bool = False, num_items_in_batch=None):
        """The loss terms' shares summed (``metricbert.terms``), their statistics recorded."""
        step = self.step_vectors(model, inputs)
        loss, shares, statistics = None, {}, {}
        for term in self.loss_terms:
            value = term(step)
            statistics.update(value.statistics)
            if value.loss is not None:
                shares[term.name] = value.loss
                loss = value.loss if loss is None else loss + value.loss
        statistics["embedding_spread"] = embedding_spread(torch.cat([step.titles, step.descriptions]))
        if self.args.log_gradient_norms and model.training and self._is_logging_step():
            encoder = [
                p for p in self.accelerator.unwrap_model(model).base_model.parameters() if p.requires_grad
            ]
            norms = term_gradient_norms(shares, encoder)
            statistics.update({f"grad_norm_{name}": norm for name, norm in norms.items()})
        self.record(statistics)
        return (loss, step.outputs) if return_outputs else loss

    def step_vectors(self, model, inputs) -> StepVectors:
        """One forward pass of ``model`` over the batch: the pooled vectors (gathered from every
        process when negatives are mined globally) and the guide's where a term needs them."""
        args: MetricBertConfig = self.args
        if not args.attention_dropout:
            # Off through the backward pass too (training_step switches it back after it).
            leave_attention_dropout_off(model)
        outputs = model(
            metric_batch=inputs,
            fields=self.batch_fields,
            pooling_input=args.pooling_input,
            length_groups=length_groups_on(args.device, args.length_groups),
            joint_fields=args.joint_field_pass,
        )
        embeddings, shard = outputs["embeddings"], None
        if self.gathers_across_processes:
            embeddings, shard = gather_with_grad(embeddings, dim=1)
        guide_vectors = None
        if self.guide_runs_every_step() or (self.guide is not None and self._is_logging_step()):
            # The guide is not part of the prepared model, so it gets the run's mixed precision here.
            with self.accelerator.autocast():
                guide_vectors = self.guide.embed(inputs, self.batch_fields).float()
            if shard is not None:
                guide_vectors = gather_field_major(guide_vectors)
        return StepVectors(
            inputs=inputs,
            outputs=outputs,
            titles=embeddings[0],
            descriptions=embeddings[1],
            fields=tuple(self.batch_fields),
            guide_vectors=guide_vectors,
            shard=shard,
            global_step=self.state.global_step,
        )

    @property
    def current_mlm_weight(self) -> float:
        """``mlm_weight`` at this step, raised linearly from 0 over ``mlm_weight_ramp_steps``."""
        mlm = next(term for term in self.loss_terms if isinstance(term, MlmTerm))
        return mlm.weight_at(self.state.global_step)

    def train(self, resume_from_checkpoint: str | bool | None = None, trial=None, **kwargs):
        """``CatalogTrainer.train``, after the MLM-head warm-up (``mlm_head_warmup_steps``) when the
        run starts afresh; a resumed run's checkpoint already holds the warmed-up head. Both draw their
        CPU dropout masks from the compiled kernel (``cpu_dropout_masks``)."""
        resuming = checkpoint_to_resume(resume_from_checkpoint, self.args.output_dir) is not None
        setup = TrainingSetup(self)
        setup.prepare()
        with self.cpu_dropout_masks():
            if self.args.mlm_head_warmup_steps and not resuming:
                self.mlm_head_warmup = setup.warm_up_mlm_head()
            return super().train(resume_from_checkpoint=resume_from_checkpoint, trial=trial, **kwargs)

    def guide_runs_every_step(self) -> bool:
        """Whether every step needs the guide's vectors (the filter or the guard), not only logging steps."""
        return self.guide is not None and (
            self.metric_loss.guide is not None or self.args.distill_weight > 0 or self.args.teacher_weight > 0
        )

    def _get_train_sampler(self, train_dataset=None):
        """Batches of neighbourhoods with ``batch_neighbourhood_size``; else the Trainer's own sampler."""
        if self.neighbourhood_sampler is not None and train_dataset in (None, self.train_dataset):
            return self.neighbourhood_sampler
        return super()._get_train_sampler(train_dataset)

    def warmup_loader(self) -> DataLoader:
        """The batches the MLM head's warm-up reads: this process's shard of the catalog, shuffled by the
        run's seed, collated like training (public, so a benchmark times the warm-up on the same batches)."""
        dataset = self.train_dataset
        processes = world_size()
        if processes > 1:
            dataset = dataset.shard(num_shards=processes, index=torch.distributed.get_rank())
        return DataLoader(
            dataset,
            batch_size=self.args.per_device_train_batch_size,
            shuffle=True,
            generator=torch.Generator().manual_seed(self.args.seed),
            collate_fn=self.data_collator,
        )

    @property
    def gathers_across_processes(self) -> bool:
        """Whether negatives are mined from the batch of every process (``gather_across_devices``)."""
        return self.args.gather_across_devices and world_size() > 1

    def _is_logging_step(self) -> bool:
        """Whether the update this micro-batch belongs to will be logged (or is the first)."""
        every = max(int(self.state.logging_steps or 1), 1)
        return self.state.global_step == 0 or (self.state.global_step + 1) % every == 0

    def objective_card_section(self) -> str:
        distill = " + distill_weight * L_distill" if self.args.distill_weight > 0 else ""
        teacher = " + teacher_weight * L_teacher" if self.args.teacher_weight > 0 else ""
        section = (
            "## MetricBERT objective\n\n"
            f"`L = mlm_weight * L_MLM + triplet_weight * L_{self.metric_loss.name}{distill}{teacher}`, with:\n\n"
            + json_block({**self.args.loss_config(), **self.metric_loss.get_config_dict()})
        )
        if self.mlm_head_warmup is not None:
            warmup = self.mlm_head_warmup
            encoded = (
                f" on the states of {warmup.encoded_batches} batches encoded once "
                f"({warmup.encoded_tokens} masked tokens)"
                if warmup.encoded_batches
                else ""
            )
            prior = (
                ""
                if warmup.loss_with_prior is None
                else f" -> {warmup.loss_with_prior:.3f} with the catalog's word prior as output bias"
            )
            section += (
                f"\nThe MLM head was warmed up alone for {warmup.steps} steps{encoded} first: MLM loss "
                f"{warmup.loss_before:.3f}{prior} -> {warmup.loss_after:.3f}.\n"
            )
        return section
