"""Objectives that score the positive against negatives: MNRL and the logistic (BPR) triplet."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from metricbert_trainer.base.distances import cosine_matrix, paired_cosine
from metricbert_trainer.metricbert.losses.base import InBatchLoss, MinedBatch
from metricbert_trainer.metricbert.losses.mining import Mining


class MultipleNegativesRankingLoss(InBatchLoss):
    """In-batch softmax cross-entropy: ``L = -mean log softmax(scale * s(a, .))[p]``.

    Every admissible element of the batch (``negative_pool``, minus filtered false negatives)
    is a negative at once, so ``mining`` does not apply; the logged mining statistics still
    describe the hardest negative, for comparison with the other objectives. ``s`` is the
    cosine similarity and ``scale`` the inverse temperature (20, as in sentence-transformers).

    References: Henderson et al., "Efficient Natural Language Response Suggestion for Smart
    Reply", 2017; Reimers and Gurevych, "Sentence-BERT", EMNLP 2019.
    """

    name = "mnrl"

    def __init__(
        self,
        scale: float = 20.0,
        **mining_options,
    ) -> None:
        mining = Mining(mining_options.get("mining", Mining.HARD))
        if mining is not Mining.HARD:
            raise ValueError(
                f"mining={mining.value} does not apply to objective mnrl: every in-batch element "
                "is its negative. Leave mining at hard (used for the logged statistics only)."
            )
        if scale <= 0:
            raise ValueError(f"scale must be > 0; got {scale}.")
        super().__init__(**mining_options)
        self.scale = scale

    def get_config_dict(self) -> dict[str, object]:
        return {**super().get_config_dict(), "scale": self.scale}

    def anchor_losses(self, batch: MinedBatch) -> torch.Tensor:
        logits = self.scale * cosine_matrix(batch.elements[batch.anchor_index], batch.elements)
        rows = torch.arange(len(batch.anchor_index), device=logits.device)
        candidates = batch.allowed.clone()
        candidates[rows, batch.positive_index] = True
        logits = logits.masked_fill(~candidates, float("-inf"))
        return F.cross_entropy(logits, batch.positive_index, reduction="none")


class LogisticTripletLoss(InBatchLoss):
    """``L = mean over anchors of -log sigmoid(s(a, p) - s(a, n))``, ``s`` the cosine similarity.

    The BPR-style title/description triplet: a soft, margin-free triplet whose gradient never
    vanishes, weighted by how badly the pair is ordered (Rendle et al., "BPR: Bayesian
    Personalized Ranking from Implicit Feedback", UAI 2009), as multi-task NER and
    title/description similarity models use it on product titles and descriptions.
    """

    name = "logistic_triplet"

    def anchor_losses(self, batch: MinedBatch) -> torch.Tensor:
        anchors = batch.elements[batch.anchor_index]
        positive = paired_cosine(anchors, batch.elements[batch.positive_index])
        negative = paired_cosine(anchors, batch.elements[batch.negative_index])
        return -F.logsigmoid(positive - negative)
