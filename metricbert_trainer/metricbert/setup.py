"""The phases a MetricBERT run goes through once, before its first step.

Each is there only when an option asks for it, and each reads the whole training catalog: the
guide's vectors of every text (``guide_embedding_cache``), the batches of neighbourhoods listed
from them (``batch_neighbourhood_size``), the teacher's TF-IDF, a second encoder's vectors and the
shared-neighbour lists (``teacher_*``), and last the MLM head's warm-up
(``mlm_head_warmup_steps``). ``MetricBertTrainer.train`` runs them through ``TrainingSetup``, so
the trainer keeps training, the loss and evaluation; the catalog-wide work is here, in the order
it runs.
"""

from __future__ import annotations

import dataclasses
import logging
import time

import numpy as np
import torch
from scipy import sparse

from metricbert_trainer.base.distributed import listed_in_shares, world_size
from metricbert_trainer.base.length_groups import length_groups_on
from metricbert_trainer.evaluation.candidate_lists import UnitViews, indexed_unit_rows
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

logger = logging.getLogger(__name__)


def listed_by() -> str:
    """How a log line says the catalog's lists were listed: by shares in a distributed run."""
    processes = world_size()
    return f" ({processes} processes, a share each)" if processes > 1 else ""


class TrainingSetup:
    """The set-up phases of one ``MetricBertTrainer`` run, each filling what its option needs on
    the trainer (the guide's cache, ``neighbourhood_sampler``, ``teacher_parts``,
    ``mlm_head_warmup``); a phase whose result is already there (given, or a second ``train``)
    is skipped."""

    def __init__(self, trainer) -> None:
        self.trainer = trainer
        self.args = trainer.args

    def prepare(self) -> None:
        """Every phase before the MLM head's warm-up, in the order each needs the one before."""
        trainer, args = self.trainer, self.args
        if args.guide_embedding_cache and trainer.guide_runs_every_step() and self.draws_whole_catalog():
            self.cache_guide_embeddings()
        if args.batch_neighbourhood_size and trainer.neighbourhood_sampler is None:
            trainer.neighbourhood_sampler = self.build_neighbourhood_sampler()
        teacher = trainer.teacher_parts
        if args.teacher_weight > 0 and teacher.tfidf is None:
            teacher.tfidf = self.fit_token_tfidf()
        if args.teacher_encoder and teacher.encoder is None:
            teacher.encoder = self.encode_with_teacher_encoder()
        if args.teacher_shared_neighbours and teacher.shared_neighbours is None:
            teacher.shared_neighbours = self.list_shared_neighbours()

    def cache_guide_embeddings(self) -> None:
        """The guide's vectors of every catalog text, encoded once (``guide_embedding_cache``), so
        that a step looks its batch up instead of running the frozen start on it."""
        texts = [text for name in self.trainer.fields for text in self.field_texts(name)]
        tokens = [self.trainer.training_token_rows[name] for name in self.trainer.fields]
        logger.info("Caching the guide's vectors of %d texts (guide_embedding_cache).", len(texts))
        started = time.perf_counter()
        self.trainer.guide.cache_embeddings(
            self.trainer.processing_class,
            texts,
            keys=[key for rows in tokens for key in rows.keys],
            lengths=np.concatenate([rows.lengths for rows in tokens]),
            max_length=self.args.max_length,
            device=self.args.device,
            autocast=self.trainer.accelerator.autocast,
            # The size the guide already runs at in the loop: known to fit, and on CPUs faster than
            # larger batches (32 texts a batch encoded the wine sample 1.3 times as fast as 128).
            batch_size=self.args.per_device_train_batch_size,
            show_progress=self.shows_progress(),
            storage=self.args.guide_embedding_cache_dtype,
        )
        sharers = self.trainer.guide.cache_sharers
        logger.info(
            "Cached the guide's vectors of %d texts in %.1f s (guide_embedding_cache, %s: %.2f GiB%s).",
            self.trainer.guide.cached_texts,
            time.perf_counter() - started,
            self.args.guide_embedding_cache_dtype.value,
            self.trainer.guide.cache_matrix().nbytes / 2**30,
            f", one copy for this machine's {sharers} processes" if sharers > 1 else "",
        )

    def field_texts(self, name: str) -> list[str]:
        """The training catalog's texts of field ``name``, as strings."""
        return [str(text) for text in self.trainer.train_dataset[name][:]]

    def guide_cache_rows(self) -> dict[str, np.ndarray]:
        """Each field's rows of the guide's cache (``StartingModelGuide.cache_matrix``), one per
        catalog item; the cache is filled first if the run has not filled it. Reading the start's
        vectors through these rows, rather than a copy of each field, is what keeps the lists'
        memory to the cache and one matrix (``item_vectors``, ``unit_rows_of``)."""
        if not self.trainer.guide.cached_texts:
            self.cache_guide_embeddings()
        return {
            name: self.trainer.guide.cache_rows(self.trainer.training_token_rows[name].keys)
            for name in self.trainer.fields
        }

    def guide_catalog_unit_views(self) -> UnitViews:
        """The frozen start's vectors of every catalog text at unit length, each field a column
        slice of the storage of the FAISS index the teacher's candidates are searched in
        (``candidate_lists.indexed_unit_rows``): one copy of them beside the guide's cache."""
        rows = self.guide_cache_rows()
        return indexed_unit_rows(self.trainer.guide.cache_matrix().numpy(), rows)

    def guide_catalog_vectors(self) -> list[torch.Tensor]:
        """The frozen start's vectors of every catalog text, ``[N, H]`` per field, in float32."""
        rows = self.guide_cache_rows()
        return [self.trainer.guide.cache_matrix()[field_rows].float() for field_rows in rows.values()]

    def build_neighbourhood_sampler(self) -> NeighbourhoodSampler:
        """The sampler of ``batch_neighbourhood_size``, from the guide's cached vectors of every text."""
        field_rows = list(self.guide_cache_rows().values())
        started = time.perf_counter()
        size = self.args.batch_neighbourhood_size
        neighbours = listed_in_shares(
            lambda rows: neighbours_of_fields(
                [self.trainer.guide.cache_matrix()] * len(field_rows),
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

    def fit_token_tfidf(self) -> TokenTfidf:
        """The teacher's document frequencies, per batch slot: a two-field catalog's own fields,
        else every field's texts for both slots (each slot's pair is drawn from any field); with
        ``teacher_tfidf_mode`` concat, one over a two-field catalog's items, their fields joined."""
        vocabulary = len(self.trainer.processing_class)
        counts = {name: rows.counts(vocabulary) for name, rows in self.trainer.training_token_rows.items()}
        two_fields = tuple(self.trainer.fields) == tuple(self.trainer.batch_fields)
        if self.args.teacher_tfidf_mode is TeacherTfidfMode.CONCAT:
            if two_fields:
                return TokenTfidf.fit(
                    {JOINED: joined_counts(list(counts.values()))},
                    self.trainer.processing_class.all_special_ids,
                )
            # A batch slot of such a catalog holds any of its fields: there is no item's pair to join.
            logger.warning(
                "teacher_tfidf_mode concat joins an item's title and description: the catalog has the "
                "fields %s, so the teacher's TF-IDF compares each batch slot with its own.",
                list(self.trainer.fields),
            )
        if not two_fields:
            counts = dict.fromkeys(
                self.trainer.batch_fields, sparse.vstack(list(counts.values()), format="csr")
            )
        return TokenTfidf.fit(counts, self.trainer.processing_class.all_special_ids)

    def encode_with_teacher_encoder(self) -> TeacherEncoder:
        """``teacher_encoder`` loaded and its vectors of every catalog text encoded (or read from
        ``teacher_encoder_cache``), at the run's ``max_length``."""
        started = time.perf_counter()
        teacher = TeacherEncoder(self.args.teacher_encoder)
        logger.info("Teacher encoder %s: encoding the catalog's texts.", self.args.teacher_encoder)
        teacher.encode_catalog_texts(
            self.trainer.processing_class,
            [text for name in self.trainer.fields for text in self.field_texts(name)],
            max_length=self.args.max_length,
            device=self.args.device,
            batch_size=self.args.per_device_train_batch_size,
            cache_path=self.args.teacher_encoder_cache,
            show_progress=self.shows_progress(),
        )
        logger.info("Teacher encoder ready in %.1f s.", time.perf_counter() - started)
        return teacher

    def list_shared_neighbours(self) -> SharedNeighbours | None:
        """Every catalog item's ``teacher_shared_neighbours`` nearest items under the teacher's ranking
        of the whole catalog (the guide's cached vectors and the teacher's TF-IDF), listed once;
        none in a catalog of other than two fields, or too small to have that many neighbours per
        item (see the warnings): the recipes set the option, and must still train such catalogs."""
        if tuple(self.trainer.fields) != tuple(self.trainer.batch_fields):
            # A batch slot of such a catalog holds any of its fields, so the (title, description)
            # keys that find an item in its lists do not exist.
            logger.warning(
                "teacher_shared_neighbours finds a batch's items by their title and description: "
                "the catalog has the fields %s, so the teacher runs without shared neighbours.",
                list(self.trainer.fields),
            )
            return None
        items = len(self.trainer.train_dataset)
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
        tokens = self.trainer.training_token_rows
        vocabulary = len(self.trainer.processing_class)
        tfidf = self.trainer.teacher_parts.tfidf.catalog_views(
            {name: tokens[name].counts(vocabulary) for name in self.trainer.fields}
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
            encoder = self.guide_catalog_unit_views()
        else:
            encoder = self.guide_catalog_vectors()
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
        return SharedNeighbours(lists, [tokens[name].keys for name in self.trainer.fields])

    def warm_up_mlm_head(self) -> MlmHeadWarmup:
        """``mlm_warmup.warm_up_mlm_head`` with the run's settings; its time includes counting the
        word prior (``mlm_head_warmup_word_prior``), which every process counts on the whole catalog."""
        started = time.perf_counter()
        word_prior = None
        if self.args.mlm_head_warmup_word_prior:
            columns = [self.trainer.training_token_rows[name] for name in self.trainer.fields]
            word_prior = word_piece_log_prior(self.trainer.processing_class, columns)
            logger.info(
                "MLM-head warm-up: word prior counted over %d texts in %.1f s.",
                sum(map(len, columns)),
                time.perf_counter() - started,
            )
        warmup = warm_up_mlm_head(
            self.trainer.model,
            self.trainer.warmup_loader(),
            self.trainer.batch_fields,
            steps=self.args.mlm_head_warmup_steps,
            learning_rate=self.args.mlm_head_warmup_learning_rate,
            device=self.args.device,
            autocast=self.trainer.accelerator.autocast,
            show_progress=self.shows_progress(),
            masked_tokens=self.args.mlm_head_warmup_masked_tokens,
            length_groups=length_groups_on(self.args.device, self.args.length_groups),
            tokens_per_step=self.args.mlm_head_warmup_tokens_per_step,
            word_prior=word_prior,
            seed=self.args.seed,
        )
        return dataclasses.replace(warmup, seconds=time.perf_counter() - started)

    def shows_progress(self) -> bool:
        """Whether the phases before the first step draw a progress bar: as the training loop's own."""
        return not self.args.disable_tqdm and self.trainer.is_local_process_zero()

    def draws_whole_catalog(self) -> bool:
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
        return drawn >= len(self.trainer.train_dataset)
