"""The starting model kept frozen beside the one being trained, as a guide against false negatives.

In a homogeneous catalog the closest other element of a batch is often a truly similar item,
and pushing it away teaches the model the opposite of what the ranking wants. The encoder as it
was before training is a cheap witness of that: a mined negative that it already placed closer
to the anchor than the anchor's own positive is suspect. The guide serves two purposes:

- a diagnostic (``guide_negative_closer_rate``): the share of mined negatives the starting model
  ranks above the positive, logged at every logging step;
- a filter (``false_negative_filter``): such candidates are not mined at all, which is
  GISTEmbed's guided in-batch selection (Solatorio, 2024) with the starting model as the guide.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from metricbert_trainer.base.collator import field_inputs, unmasked
from metricbert_trainer.base.distances import Distance, paired_distance, pairwise_distance
from metricbert_trainer.base.modeling import whole_copy
from metricbert_trainer.base.pooling import mean_pool


class StartingModelGuide:
    """A frozen copy of ``model`` (taken at construction) that embeds a batch's elements.

    The copy is whole on every process, also when the model's parameters are already partitioned
    by DeepSpeed ZeRO-3 (transformers loads them so under a ZeRO-3 config): the guide runs
    outside the training engine, on each process's own batch, and a BERT-Large encoder (1.3 GB in
    fp32) fits beside its partitioned twin.
    """

    def __init__(self, model: PreTrainedModel) -> None:
        self.encoder = whole_copy(model.base_model).eval().requires_grad_(False)

    @torch.no_grad()
    def embed(self, batch: dict[str, torch.Tensor], fields: tuple[str, ...]) -> torch.Tensor:
        """Element vectors, field-major ([titles; descriptions]), from the unmasked inputs."""
        device = batch[f"{fields[0]}_input_ids"].device
        if next(self.encoder.parameters()).device != device:
            self.encoder.to(device)
        vectors = []
        for name in fields:
            inputs = unmasked(field_inputs(batch, name))
            vectors.append(mean_pool(self.encoder(**inputs).last_hidden_state, inputs["attention_mask"]))
        return torch.cat(vectors)

    @staticmethod
    def closer_than_positive(
        guide_vectors: torch.Tensor,
        anchor_index: torch.Tensor,
        positive_index: torch.Tensor,
        margin: float = 0.0,
    ) -> torch.Tensor:
        """[A, N]: True where the guide puts element n closer to anchor a than a's positive is, plus
        ``margin`` (angular distance): with a margin, near-duplicates of the positive count too."""
        distances = pairwise_distance(guide_vectors[anchor_index], guide_vectors, Distance.ANGULAR)
        rows = torch.arange(len(anchor_index), device=distances.device)
        return distances < distances[rows, positive_index][:, None] + margin

    @staticmethod
    def negative_closer_rate(
        guide_vectors: torch.Tensor,
        anchor_index: torch.Tensor,
        positive_index: torch.Tensor,
        negative_index: torch.Tensor,
    ) -> float:
        """The share of mined triplets whose negative the guide ranks above the positive."""
        anchors = guide_vectors[anchor_index]
        positive = paired_distance(anchors, guide_vectors[positive_index], Distance.ANGULAR)
        negative = paired_distance(anchors, guide_vectors[negative_index], Distance.ANGULAR)
        return float((negative < positive).float().mean())
