"""``MetricBertTrainer``: the Hugging Face Trainer with MetricBERT's MLM + triplet loss."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time

import numpy as np
import torch
from scipy import sparse
from torch.utils.data import DataLoader
from transformers import PreTrainedModel

from metricbert_trainer.base.attention import leave_attention_dropout_off
from metricbert_trainer.base.checkpoints import checkpoint_to_resume
from metricbert_trainer.base.collator import field_inputs, unmasked
from metricbert_trainer.base.distributed import (
    gather_with_grad,
    listed_in_shares,
    share_of_global_mean,
    world_size,
)
from metricbert_trainer.base.dropout_masks import paired_draw_dropout
from metricbert_trainer.base.gradient_norms import term_gradient_norms
from metricbert_trainer.base.length_groups import length_groups_on
from metricbert_trainer.evaluation.candidate_lists import UnitViews, indexed_unit_rows
from metricbert_trainer.metricbert.collator import MetricBertCollator
from metricbert_trainer.metricbert.config import MetricBertConfig
from metricbert_trainer.metricbert.forward import enable_metric_forward
from metricbert_trainer.metricbert.guide import StartingModelGuide
from metricbert_trainer.metricbert.losses import InBatchLoss, build_loss, embedding_spread
from metricbert_trainer.metricbert.losses.distillation import (
    DistillWeighting,
    guide_positive_confidence,
    relational_distillation,
)
from metricbert_trainer.metricbert.losses.teacher import hybrid_teacher_distillation
from metricbert_trainer.metricbert.mlm_warmup import MlmHeadWarmup, warm_up_mlm_head
from metricbert_trainer.metricbert.neighbourhood_batches import (
    NeighbourhoodSampler,
    candidates_per_item,
    neighbours_of_fields,
)
from metricbert_trainer.metricbert.shared_neighbours import (
    SharedNeighbours,
    teacher_candidate_lists,
    teacher_neighbour_lists,
)
from metricbert_trainer.metricbert.teacher_encoder import TeacherEncoder
from metricbert_trainer.metricbert.token_tfidf import JOINED, TeacherTfidfMode, TokenTfidf, joined_counts
from metricbert_trainer.metricbert.word_prior import word_piece_log_prior
from metricbert_trainer.publishing.model_card import CardMethod
from metricbert_trainer.training.trainer import CatalogTrainer

logger = logging.getLogger(__name__)


def listed_by() -> str:
    """How a log line says the catalog's lists were listed: by shares in a distributed run."""
    processes = world_size()
    return f" ({processes} processes, a share each)" if processes > 1 else ""


def gather_field_major(vectors: torch.Tensor) -> torch.Tensor:
    """A frozen model's ``[titles; descriptions]`` of this process's items, gathered into the same
    layout over every process's items (the layout the gathered student embeddings have)."""
    local = vectors.view(2, -1, vectors.shape[-1])
    return gather_with_grad(local, dim=1)[0].flatten(0, 1)


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
        self.token_tfidf: TokenTfidf | None = None
        self.teacher_encoder: TeacherEncoder | None = None
        self.shared_neighbours: SharedNeighbours | None = None
        self.neighbourhood_sampler: NeighbourhoodSampler | None = None
        super().__init__(model, args, *positional, **kwargs)
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
        titles, descriptions = embeddings[0], embeddings[1]
        guide_vectors = None
        if self._guide_runs_every_step() or (self.guide is not None and self._is_logging_step()):
            # The guide is not part of the prepared model, so it gets the run's mixed precision here.
            with self.accelerator.autocast():
                guide_vectors = self.guide.embed(inputs, self.batch_fields).float()
            if shard is not None:
                guide_vectors = gather_field_major(guide_vectors)
        metric = self.metric_loss(titles, descriptions, shard=shard, guide_vectors=guide_vectors)
        terms = {self.metric_loss.name: args.triplet_weight * metric.loss}
        loss = terms[self.metric_loss.name]
        mlm_loss = outputs["mlm_loss"]
        if shard is not None:
            # Per masked token of every process; its mean over processes (as logged) is that mean.
            mlm_loss = share_of_global_mean(mlm_loss * outputs["mlm_tokens"], outputs["mlm_tokens"], shard)
        if args.mlm_weight > 0:
            terms["mlm"] = self.current_mlm_weight * mlm_loss
            loss = loss + terms["mlm"]
        statistics = {
            "mlm_loss": mlm_loss.detach(),
            f"{self.metric_loss.name}_loss": metric.loss.detach(),
            "embedding_spread": embedding_spread(torch.cat([titles, descriptions])),
            **metric.statistics,
        }
        if args.distill_weight > 0:
            anchor_weights = None
            if args.distill_weighting == DistillWeighting.GUIDE_CONFIDENCE:
                anchor_weights = guide_positive_confidence(
                    guide_vectors, temperature=args.distill_temperature
                ).pow(args.distill_confidence_power)
                statistics["distill_anchor_weight"] = anchor_weights.mean()
            distill_loss = relational_distillation(
                torch.cat([titles, descriptions]),
                guide_vectors,
                temperature=args.distill_temperature,
                include_positive=args.distill_include_positive,
                within_field=args.distill_within_field,
                anchor_weights=anchor_weights,
                shard=shard,
            )
            terms["distill"] = args.distill_weight * distill_loss
            loss = loss + terms["distill"]
            statistics["distill_loss"] = distill_loss.detach()
        if args.teacher_weight > 0:
            teacher_loss = self._teacher_term(inputs, titles, descriptions, guide_vectors, shard)
            terms["teacher"] = args.teacher_weight * teacher_loss
            loss = loss + terms["teacher"]
            statistics["teacher_loss"] = teacher_loss.detach()
        if guide_vectors is not None and len(metric.anchor_index):
            statistics["guide_negative_closer_rate"] = self.guide.negative_closer_rate(
                guide_vectors, metric.anchor_index, metric.positive_index, metric.negative_index
            )
        if args.log_gradient_norms and model.training and self._is_logging_step():
            encoder = [
                p for p in self.accelerator.unwrap_model(model).base_model.parameters() if p.requires_grad
            ]
            norms = term_gradient_norms(terms, encoder)
            statistics.update({f"grad_norm_{name}": norm for name, norm in norms.items()})
        self.record(statistics)
        return (loss, outputs) if return_outputs else loss

    def _teacher_term(self, inputs, titles, descriptions, guide_vectors, shard) -> torch.Tensor:
        """``losses.teacher``'s term: the batch's TF-IDF distances from its unmasked token ids
        (``token_tfidf``), per field summed or over the joined fields, beside the guide's and the
        student's vectors."""
        fields = {name: unmasked(field_inputs(inputs, name)) for name in self.batch_fields}
        tfidf = [
            gather_with_grad(vectors, dim=0)[0] if shard is not None else vectors
            for vectors in self.token_tfidf.batch_views(fields)
        ]
        tfidf_distances = sum(1.0 - vectors @ vectors.T for vectors in tfidf)
        encoder_vectors = None
        if self.teacher_encoder is not None:
            encoder_vectors = self.teacher_encoder.vectors(inputs, self.batch_fields)
            if shard is not None:
                encoder_vectors = gather_field_major(encoder_vectors)
        overlaps = None
        if self.shared_neighbours is not None:
            rows = self.shared_neighbours.batch_rows(inputs, self.batch_fields)
            if shard is not None:
                rows = gather_with_grad(rows, dim=0)[0]
            overlaps = self.shared_neighbours.overlaps(rows)
        return hybrid_teacher_distillation(
            titles,
            descriptions,
            guide_vectors,
            tfidf_distances,
            tfidf_weight=self.args.teacher_tfidf_weight,
            temperature=self.args.teacher_temperature,
            distance=self.args.distance,
            shard=shard,
            encoder_vectors=encoder_vectors,
            neighbour_overlaps=overlaps,
            shared_neighbour_weight=self.args.teacher_shared_neighbour_weight,
        )

    @property
    def current_mlm_weight(self) -> float:
        """``mlm_weight``, raised linearly from 0 over the first ``mlm_weight_ramp_steps`` steps."""
        ramp = self.args.mlm_weight_ramp_steps
        if ramp == 0:
            return self.args.mlm_weight
        return self.args.mlm_weight * min(1.0, (self.state.global_step + 1) / ramp)

    def train(self, resume_from_checkpoint: str | bool | None = None, trial=None, **kwargs):
        """``CatalogTrainer.train``, after the MLM-head warm-up (``mlm_head_warmup_steps``) when the
        run starts afresh; a resumed run's checkpoint already holds the warmed-up head. With
        ``paired_draw_dropout`` both draw their CPU dropout masks in pairs (``base.dropout_masks``)."""
        resuming = checkpoint_to_resume(resume_from_checkpoint, self.args.output_dir) is not None
        if self.args.guide_embedding_cache and self._guide_runs_every_step() and self._draws_whole_catalog():
            self._cache_guide_embeddings()
        if self.args.batch_neighbourhood_size and self.neighbourhood_sampler is None:
            self.neighbourhood_sampler = self._build_neighbourhood_sampler()
        if self.args.teacher_weight > 0 and self.token_tfidf is None:
            self.token_tfidf = self._fit_token_tfidf()
        if self.args.teacher_encoder and self.teacher_encoder is None:
            self.teacher_encoder = self._encode_with_teacher_encoder()
        if self.args.teacher_shared_neighbours and self.shared_neighbours is None:
            self.shared_neighbours = self._list_shared_neighbours()
        masks = paired_draw_dropout(self.model) if self.args.paired_draw_dropout else contextlib.nullcontext()
        with masks:
            if self.args.mlm_head_warmup_steps and not resuming:
                self.mlm_head_warmup = self._warm_up_mlm_head()
            return super().train(resume_from_checkpoint=resume_from_checkpoint, trial=trial, **kwargs)

    def _encode_with_teacher_encoder(self) -> TeacherEncoder:
        """``teacher_encoder`` loaded and its vectors of every catalog text encoded (or read from
        ``teacher_encoder_cache``), at the run's ``max_length``."""
        started = time.perf_counter()
        teacher = TeacherEncoder(self.args.teacher_encoder)
        logger.info("Teacher encoder %s: encoding the catalog's texts.", self.args.teacher_encoder)
        teacher.encode_catalog_texts(
            self.processing_class,
            [text for name in self.fields for text in self._field_texts(name)],
            max_length=self.args.max_length,
            device=self.args.device,
            batch_size=self.args.per_device_train_batch_size,
            cache_path=self.args.teacher_encoder_cache,
            show_progress=self._shows_progress(),
        )
        logger.info("Teacher encoder ready in %.1f s.", time.perf_counter() - started)
        return teacher

    def _list_shared_neighbours(self) -> SharedNeighbours | None:
        """Every catalog item's ``teacher_shared_neighbours`` nearest items under the teacher's ranking
        of the whole catalog (the guide's cached vectors and the teacher's TF-IDF), listed once;
        none in a catalog of other than two fields, or too small to have that many neighbours per
        item (see the warnings): the recipes set the option, and must still train such catalogs."""
        if tuple(self.fields) != tuple(self.batch_fields):
            # A batch slot of such a catalog holds any of its fields, so the (title, description)
            # keys that find an item in its lists do not exist.
            logger.warning(
                "teacher_shared_neighbours finds a batch's items by their title and description: "
                "the catalog has the fields %s, so the teacher runs without shared neighbours.",
                list(self.fields),
            )
            return None
        items = len(self.train_dataset)
        if self.args.teacher_shared_neighbours >= items - 1:
            # Every item's set would be the whole catalog, so all overlaps would be equal: the
            # recipes' k of 50 on a catalog of a few dozen items teaches nothing, and is not an error.
            logger.warning(
                "teacher_shared_neighbours %d: the catalog has %d items, too few for that many "
                "neighbours per item; the teacher runs without shared neighbours.",
                self.args.teacher_shared_neighbours,
                items,
            )
            return None
        started = time.perf_counter()
        tokens = self.training_token_rows
        vocabulary = len(self.processing_class)
        tfidf = self.token_tfidf.catalog_views(
            {name: tokens[name].counts(vocabulary) for name in self.fields}
        )
        options = {
            "tfidf_weight": self.args.teacher_tfidf_weight,
            "neighbours": self.args.teacher_shared_neighbours,
            "distance": self.args.distance,
        }
        candidates = self.args.teacher_shared_neighbour_candidates
        searched = 0 < candidates < items - 1  # as many candidates as other items: the exact lists
        logger.info(
            "Shared neighbours: listing the teacher's %d nearest items of each of %d (%s).",
            self.args.teacher_shared_neighbours,
            items,
            f"among its {candidates} nearest under the start"
            if searched
            else "every item against every other",
        )
        if searched:
            options["candidates"] = candidates
            encoder = self._guide_catalog_unit_views()
        else:
            encoder = self._guide_catalog_vectors()
        list_rows = teacher_candidate_lists if searched else teacher_neighbour_lists
        lists = listed_in_shares(
            lambda rows: list_rows(encoder, tfidf, rows=rows, **options), items, self.args.device
        )
        logger.info(
            "Shared neighbours: the teacher's %d nearest items of each of %d, in %.1f s%s.",
            *lists.shape[::-1],
            time.perf_counter() - started,
            listed_by(),
        )
        return SharedNeighbours(lists, [tokens[name].keys for name in self.fields])

    def _guide_cache_rows(self) -> dict[str, np.ndarray]:
        """Each field's rows of the guide's cache (``StartingModelGuide.cache_matrix``), one per
        catalog item; the cache is filled first if the run has not filled it. Reading the start's
        vectors through these rows, rather than a copy of each field, is what keeps the lists'
        memory to the cache and one matrix (``item_vectors``, ``unit_rows_of``)."""
        if not self.guide.cached_texts:
            self._cache_guide_embeddings()
        return {name: self.guide.cache_rows(self.training_token_rows[name].keys) for name in self.fields}

    def _guide_catalog_unit_views(self) -> UnitViews:
        """The frozen start's vectors of every catalog text at unit length, each field a column
        slice of the storage of the FAISS index the teacher's candidates are searched in
        (``candidate_lists.indexed_unit_rows``): one copy of them beside the guide's cache."""
        rows = self._guide_cache_rows()
        return indexed_unit_rows(self.guide.cache_matrix().numpy(), rows)

    def _guide_catalog_vectors(self) -> list[torch.Tensor]:
        """The frozen start's vectors of every catalog text, ``[N, H]`` per field, in float32."""
        rows = self._guide_cache_rows()
        return [self.guide.cache_matrix()[field_rows].float() for field_rows in rows.values()]

    def _warm_up_mlm_head(self) -> MlmHeadWarmup:
        """``mlm_warmup.warm_up_mlm_head`` with the run's settings; its time includes counting the
        word prior (``mlm_head_warmup_word_prior``), which every process counts on the whole catalog."""
        started = time.perf_counter()
        word_prior = None
        if self.args.mlm_head_warmup_word_prior:
            columns = [self.training_token_rows[name] for name in self.fields]
            word_prior = word_piece_log_prior(self.processing_class, columns)
            logger.info(
                "MLM-head warm-up: word prior counted over %d texts in %.1f s.",
                sum(map(len, columns)),
                time.perf_counter() - started,
            )
        warmup = warm_up_mlm_head(
            self.model,
            self.warmup_loader(),
            self.batch_fields,
            steps=self.args.mlm_head_warmup_steps,
            learning_rate=self.args.mlm_head_warmup_learning_rate,
            device=self.args.device,
            autocast=self.accelerator.autocast,
            show_progress=self._shows_progress(),
            masked_tokens=self.args.mlm_head_warmup_masked_tokens,
            length_groups=length_groups_on(self.args.device, self.args.length_groups),
            tokens_per_step=self.args.mlm_head_warmup_tokens_per_step,
            word_prior=word_prior,
            seed=self.args.seed,
        )
        return dataclasses.replace(warmup, seconds=time.perf_counter() - started)

    def _shows_progress(self) -> bool:
        """Whether the phases before the first step draw a progress bar: as the training loop's own."""
        return not self.args.disable_tqdm and self.is_local_process_zero()

    def _guide_runs_every_step(self) -> bool:
        """Whether every step needs the guide's vectors (the filter or the guard), not only logging steps."""
        return self.guide is not None and (
            self.metric_loss.guide is not None or self.args.distill_weight > 0 or self.args.teacher_weight > 0
        )

    def _draws_whole_catalog(self) -> bool:
        """Whether the run draws at least as many items as the catalog holds: the cache's pass over
        the catalog costs about what an epoch of the guide's forwards does, so a shorter run
        (``max_steps``) would pay more for it than it saves."""
        args = self.args
        if args.max_steps <= 0:
            return True
        drawn = (
            args.max_steps
            * args.per_device_train_batch_size
            * args.gradient_accumulation_steps
            * world_size()
        )
        return drawn >= len(self.train_dataset)

    def _cache_guide_embeddings(self) -> None:
        texts = [text for name in self.fields for text in self._field_texts(name)]
        tokens = [self.training_token_rows[name] for name in self.fields]
        logger.info("Caching the guide's vectors of %d texts (guide_embedding_cache).", len(texts))
        started = time.perf_counter()
        self.guide.cache_embeddings(
            self.processing_class,
            texts,
            keys=[key for rows in tokens for key in rows.keys],
            lengths=np.concatenate([rows.lengths for rows in tokens]),
            max_length=self.args.max_length,
            device=self.args.device,
            autocast=self.accelerator.autocast,
            # The size the guide already runs at in the loop: known to fit, and on CPUs faster than
            # larger batches (32 texts a batch encoded the wine sample 1.3 times as fast as 128).
            batch_size=self.args.per_device_train_batch_size,
            show_progress=self._shows_progress(),
            storage=self.args.guide_embedding_cache_dtype,
        )
        sharers = self.guide.cache_sharers
        logger.info(
            "Cached the guide's vectors of %d texts in %.1f s (guide_embedding_cache, %s: %.2f GiB%s).",
            self.guide.cached_texts,
            time.perf_counter() - started,
            self.args.guide_embedding_cache_dtype.value,
            self.guide.cache_matrix().nbytes / 2**30,
            f", one copy for this machine's {sharers} processes" if sharers > 1 else "",
        )

    def _field_texts(self, name: str) -> list[str]:
        """The training catalog's texts of field ``name``, as strings."""
        return [str(text) for text in self.train_dataset[name][:]]

    def _build_neighbourhood_sampler(self) -> NeighbourhoodSampler:
        """The sampler of ``batch_neighbourhood_size``, from the guide's cached vectors of every text."""
        field_rows = list(self._guide_cache_rows().values())
        started = time.perf_counter()
        size = self.args.batch_neighbourhood_size
        neighbours = listed_in_shares(
            lambda rows: neighbours_of_fields(
                [self.guide.cache_matrix()] * len(field_rows),
                field_rows,
                candidates=candidates_per_item(size),
                index=self.args.neighbourhood_index,
                search_parameters=self.args.neighbourhood_search_parameters,
                rows=rows,
            ),
            len(field_rows[0]),
            self.args.device,
        )
        logger.info(
            "Neighbourhood batches: the %d nearest items of each of %d (%s), in %.1f s%s.",
            neighbours.shape[1],
            len(neighbours),
            self.args.neighbourhood_index,
            time.perf_counter() - started,
            listed_by(),
        )
        return NeighbourhoodSampler(neighbours, size, seed=self.args.seed)

    def _get_train_sampler(self, train_dataset=None):
        """Batches of neighbourhoods with ``batch_neighbourhood_size``; else the Trainer's own sampler."""
        if self.neighbourhood_sampler is not None and train_dataset in (None, self.train_dataset):
            return self.neighbourhood_sampler
        return super()._get_train_sampler(train_dataset)

    def _fit_token_tfidf(self) -> TokenTfidf:
        """The teacher's document frequencies, per batch slot: a two-field catalog's own fields,
        else every field's texts for both slots (each slot's pair is drawn from any field); with
        ``teacher_tfidf_mode`` concat, one over a two-field catalog's items, their fields joined."""
        vocabulary = len(self.processing_class)
        counts = {name: rows.counts(vocabulary) for name, rows in self.training_token_rows.items()}
        two_fields = tuple(self.fields) == tuple(self.batch_fields)
        if self.args.teacher_tfidf_mode is TeacherTfidfMode.CONCAT:
            if two_fields:
                return TokenTfidf.fit(
                    {JOINED: joined_counts(list(counts.values()))}, self.processing_class.all_special_ids
                )
            # A batch slot of such a catalog holds any of its fields: there is no item's pair to join.
            logger.warning(
                "teacher_tfidf_mode concat joins an item's title and description: the catalog has the "
                "fields %s, so the teacher's TF-IDF compares each batch slot with its own.",
                list(self.fields),
            )
        if not two_fields:
            counts = dict.fromkeys(self.batch_fields, sparse.vstack(list(counts.values()), format="csr"))
        return TokenTfidf.fit(counts, self.processing_class.all_special_ids)

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
            + self.config_block({**self.args.loss_config(), **self.metric_loss.get_config_dict()})
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

    def on_logged_means(self, means: dict[str, float]) -> None:
        spread = means.get("embedding_spread")
        if spread is not None and spread < self.args.collapse_warning_spread:
            logger.warning(
                "Embedding spread %.4f is below %.4f: the batch's embeddings are collapsing onto one direction. "
                "Lower the learning rate or the MLM weight, or try negative_pool: other_field.",
                spread,
                self.args.collapse_warning_spread,
            )
