"""What every in-batch objective shares: who anchors, who is the positive, who may be a negative.

A batch of ``B`` items gives ``2B`` elements laid out field-major (see ``mining``). Every
objective of this package sees the same mined batch, so switching ``objective`` changes the loss
formula and nothing else: the anchors, the candidate mask, the false-negative filter and the
logged mining statistics stay identical, which is what makes the ablation study comparable.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from metricbert_trainer.base.distances import Distance, pairwise_distance
from metricbert_trainer.base.distributed import ProcessShard, share_of_global_mean
from metricbert_trainer.metricbert.guide import StartingModelGuide
from metricbert_trainer.metricbert.losses.mining import (
    Anchors,
    Mining,
    NegativePool,
    anchor_and_positive_indices,
    mine_negatives,
    negative_candidates,
)


@dataclass
class LossOutput:
    """The loss, the statistics worth logging next to it (plain floats, already detached), and
    the mined triplets as element indices (for diagnostics)."""

    loss: torch.Tensor
    statistics: dict[str, float]
    anchor_index: torch.Tensor
    positive_index: torch.Tensor
    negative_index: torch.Tensor


@dataclass
class MinedBatch:
    """One batch after mining, as an objective's formula needs it.

    ``elements`` [2B, H] are the pooled embeddings; ``anchor_index``, ``positive_index`` and
    ``negative_index`` [A] select the triplets; ``allowed`` [A, 2B] marks every admissible
    negative (for objectives that use all of them); ``distances`` [A, 2B] are the anchors'
    distances to every element under the configured distance.
    """

    elements: torch.Tensor
    anchor_index: torch.Tensor
    positive_index: torch.Tensor
    negative_index: torch.Tensor
    allowed: torch.Tensor
    distances: torch.Tensor

    @property
    def _rows(self) -> torch.Tensor:
        return torch.arange(len(self.anchor_index), device=self.distances.device)

    @property
    def positive_distance(self) -> torch.Tensor:
        return self.distances[self._rows, self.positive_index]

    @property
    def negative_distance(self) -> torch.Tensor:
        return self.distances[self._rows, self.negative_index]


class InBatchLoss(nn.Module):
    """Base of the objectives: mines the batch, then hands it to ``anchor_losses``.

    Subclasses set ``name`` (what configs spell) and implement ``anchor_losses(batch)`` returning
    one loss per anchor, which the base averages (over every process's anchors when the batch is
    gathered across processes); ``objective_statistics`` may add objective-specific diagnostics.
    Their constructors pass ``**mining_options`` (``distance``, ``mining``, ``anchors``,
    ``negative_pool``, ``guide``, ``false_negative_margin``) here.
    A loss given a ``guide`` (the frozen starting model, ``StartingModelGuide``) filters false
    negatives as sentence-transformers' ``GISTEmbedLoss`` does with its guide model: no candidate
    the guide places closer to the anchor than the anchor's positive (plus
    ``false_negative_margin``, in angular distance) is mined. The loss holds the guide; the
    trainer runs it on each batch's unmasked inputs and passes its vectors as ``guide_vectors``.
    ``distance`` always chooses the mined negative and the logged ``mean_d_ap``/``mean_d_an``;
    only the triplet loss also optimises it, the other objectives score pairs by their cosine.
    """

    name: str = ""

    def __init__(
        self,
        distance: Distance | str = Distance.ANGULAR,
        mining: Mining | str = Mining.HARD,
        anchors: Anchors | str = Anchors.BOTH,
        negative_pool: NegativePool | str = NegativePool.ALL,
        guide: StartingModelGuide | None = None,
        false_negative_margin: float = 0.0,
    ) -> None:
        super().__init__()
        if not 0 <= false_negative_margin < 1:
            raise ValueError(f"false_negative_margin must be in [0, 1); got {false_negative_margin}.")
        if false_negative_margin and guide is None:
            raise ValueError("false_negative_margin widens the guide's filter: it needs a guide.")
        self.distance = Distance(distance)
        self.mining = Mining(mining)
        self.anchors = Anchors(anchors)
        self.negative_pool = NegativePool(negative_pool)
        self.guide = guide
        self.false_negative_margin = false_negative_margin

    def anchor_losses(self, batch: MinedBatch) -> torch.Tensor:
        """[A]: each anchor's term of the loss."""
        raise NotImplementedError

    def objective_statistics(self, batch: MinedBatch) -> dict[str, float]:
        return {}

    def get_config_dict(self) -> dict[str, object]:
        """The settings that define this loss, for the model card and the run's logs."""
        return {
            "objective": self.name,
            "distance": self.distance.value,
            "mining": self.mining.value,
            "anchors": self.anchors.value,
            "negative_pool": self.negative_pool.value,
            "false_negative_filter": self.guide is not None,
            "false_negative_margin": self.false_negative_margin,
        }

    def anchors_and_positives(
        self, num_items: int, device: torch.device, shard: ProcessShard | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Element indices of the anchors (only ``shard``'s items' when given) and their positives."""
        anchor_index, positive_index = anchor_and_positive_indices(num_items, self.anchors)
        if shard is not None:
            own = shard.owns(anchor_index % num_items)
            anchor_index, positive_index = anchor_index[own], positive_index[own]
        return anchor_index.to(device), positive_index.to(device)

    def forward(
        self,
        titles: torch.Tensor,
        descriptions: torch.Tensor,
        excluded: torch.Tensor | None = None,
        shard: ProcessShard | None = None,
        guide_vectors: torch.Tensor | None = None,
    ) -> LossOutput:
        """``titles`` and ``descriptions`` are [B, H], row ``i`` of both from item ``i``.

        ``excluded`` ([A, 2B], optional, rows in ``anchors_and_positives`` order) removes
        candidates from mining; a loss with a guide also removes those its ``guide_vectors``
        ([2B, H'], the guide's embeddings of the same elements, field-major) call false negatives,
        and logs their share as ``filtered_candidate_rate``. Anchors left with no candidate
        (also: every anchor of a one-item batch) do not contribute to the loss. With ``shard`` the
        rows are the batch gathered from every process (``distributed.gather_with_grad``): only
        this process's items anchor, every gathered element is a candidate, and the loss is this
        process's share of the global mean.
        """
        elements = torch.cat([titles, descriptions])
        anchor_index, positive_index = self.anchors_and_positives(titles.shape[0], elements.device, shard)
        allowed = negative_candidates(anchor_index, positive_index, len(elements), self.negative_pool)
        if excluded is not None:
            allowed &= ~excluded
        filter_statistics = {}
        if self.guide is not None:
            if guide_vectors is None:
                raise ValueError(
                    "This loss filters with a guide: pass guide_vectors, its embeddings of the batch."
                )
            suspects = StartingModelGuide.closer_than_positive(
                guide_vectors, anchor_index, positive_index, self.false_negative_margin
            )
            filter_statistics["filtered_candidate_rate"] = suspects.float().mean()
            allowed &= ~suspects
        # An anchor with no candidate (filtered out, or a one-item batch) has no triplet.
        keep = allowed.any(dim=1)
        anchor_index, positive_index, allowed = anchor_index[keep], positive_index[keep], allowed[keep]
        if len(anchor_index) == 0:
            # Still reduced, so every process takes part in the same collectives.
            zero = share_of_global_mean(elements.sum() * 0.0, 0, shard)
            return LossOutput(zero, filter_statistics, anchor_index, positive_index, anchor_index)
        distances = pairwise_distance(elements[anchor_index], elements, self.distance)
        rows = torch.arange(len(anchor_index), device=elements.device)
        negative_index = mine_negatives(distances, allowed, distances[rows, positive_index], self.mining)
        batch = MinedBatch(elements, anchor_index, positive_index, negative_index, allowed, distances)
        statistics = {
            **mining_statistics(batch.positive_distance, batch.negative_distance),
            **self.objective_statistics(batch),
            **filter_statistics,
        }
        loss = share_of_global_mean(self.anchor_losses(batch).sum(), len(anchor_index), shard)
        return LossOutput(loss, statistics, anchor_index, positive_index, negative_index)


def mining_statistics(
    positive_distance: torch.Tensor, negative_distance: torch.Tensor
) -> dict[str, torch.Tensor]:
    """What tells a healthy run from a collapsing one, for any objective: the share of mined
    negatives closer than the positive, and the mean distances on both sides (0-d tensors, read
    when logged)."""
    positive_distance, negative_distance = positive_distance.detach(), negative_distance.detach()
    return {
        "negative_closer_rate": (negative_distance < positive_distance).float().mean(),
        "mean_d_ap": positive_distance.mean(),
        "mean_d_an": negative_distance.mean(),
    }


def embedding_spread(embeddings: torch.Tensor) -> float | torch.Tensor:
    """The mean angular distance between distinct elements of a batch: near 0 means collapse."""
    with torch.no_grad():
        distances = pairwise_distance(embeddings, embeddings, Distance.ANGULAR)
        count = distances.shape[0]
        if count < 2:
            return 0.0
        return (distances.sum() - distances.diagonal().sum()) / (count * (count - 1))
