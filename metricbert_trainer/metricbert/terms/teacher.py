"""The teacher term: the student's in-batch distribution pulled towards a hybrid teacher's."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from metricbert_trainer.base.collator import field_inputs, unmasked
from metricbert_trainer.base.distances import Distance
from metricbert_trainer.base.distributed import gather_field_major, gather_with_grad
from metricbert_trainer.metricbert.losses.teacher import hybrid_teacher_distillation
from metricbert_trainer.metricbert.shared_neighbours import SharedNeighbours
from metricbert_trainer.metricbert.teacher_encoder import TeacherEncoder
from metricbert_trainer.metricbert.terms.step import StepVectors, TermValue
from metricbert_trainer.metricbert.token_tfidf import TokenTfidf


@dataclass
class TeacherParts:
    """What the teacher ranks a batch with besides the frozen start, prepared once before training
    (``metricbert.setup``): the word-piece TF-IDF fitted on the catalog, an optional second
    encoder's vectors of every text, and the shared-neighbour lists of every item."""

    tfidf: TokenTfidf | None = None
    encoder: TeacherEncoder | None = None
    shared_neighbours: SharedNeighbours | None = None


class TeacherTerm:
    """``teacher_weight * L_teacher`` (``losses.teacher.hybrid_teacher_distillation``): the teacher
    fuses the frozen start's distances with the batch's TF-IDF distances (per field summed, or
    over the joined fields), a second encoder's and the items' shared-neighbour overlaps, where
    ``parts`` has them."""

    name = "teacher"

    def __init__(
        self,
        weight: float,
        parts: TeacherParts,
        *,
        tfidf_weight: float,
        temperature: float,
        distance: Distance | str,
        shared_neighbour_weight: float,
    ) -> None:
        self.weight = weight
        self.parts = parts
        self.tfidf_weight = tfidf_weight
        self.temperature = temperature
        self.distance = distance
        self.shared_neighbour_weight = shared_neighbour_weight

    @classmethod
    def from_config(cls, args, parts: TeacherParts) -> TeacherTerm:
        """The teacher a ``MetricBertConfig`` configures, ranking with ``parts``."""
        return cls(
            args.teacher_weight,
            parts,
            tfidf_weight=args.teacher_tfidf_weight,
            temperature=args.teacher_temperature,
            distance=args.distance,
            shared_neighbour_weight=args.teacher_shared_neighbour_weight,
        )

    def distillation(self, step: StepVectors) -> torch.Tensor:
        """``L_teacher`` unweighted: the batch's TF-IDF distances from its unmasked token ids,
        beside the guide's, the second encoder's and the student's vectors."""
        shard = step.shard
        fields = {name: unmasked(field_inputs(step.inputs, name)) for name in step.fields}
        tfidf = [
            gather_with_grad(vectors, dim=0)[0] if shard is not None else vectors
            for vectors in self.parts.tfidf.batch_views(fields)
        ]
        tfidf_distances = sum(1.0 - vectors @ vectors.T for vectors in tfidf)
        encoder_vectors = None
        if self.parts.encoder is not None:
            encoder_vectors = self.parts.encoder.vectors(step.inputs, step.fields)
            if shard is not None:
                encoder_vectors = gather_field_major(encoder_vectors)
        overlaps = None
        if self.parts.shared_neighbours is not None:
            rows = self.parts.shared_neighbours.batch_rows(step.inputs, step.fields)
            if shard is not None:
                rows = gather_with_grad(rows, dim=0)[0]
            overlaps = self.parts.shared_neighbours.overlaps(rows)
        return hybrid_teacher_distillation(
            step.titles,
            step.descriptions,
            step.guide_vectors,
            tfidf_distances,
            tfidf_weight=self.tfidf_weight,
            temperature=self.temperature,
            distance=self.distance,
            shard=shard,
            encoder_vectors=encoder_vectors,
            neighbour_overlaps=overlaps,
            shared_neighbour_weight=self.shared_neighbour_weight,
        )

    def __call__(self, step: StepVectors) -> TermValue:
        loss = self.distillation(step)
        return TermValue(self.weight * loss, {"teacher_loss": loss.detach()})
