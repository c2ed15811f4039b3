"""The title/description term of multi-task NER, taken from MetricBERT's loss family.

Siskind & Shah's triplet is ``-log sigmoid(c_p - c_n)`` with ``c_p = cos(t_i, d_p)`` (the item's
own description) and ``c_n = cos(t_i, d_n)`` (a random other item's): the family's
``LogisticTripletLoss`` with titles as the only anchors and descriptions as the only negatives,
drawn at random. Any other objective of the family plugs into the same slots.
"""

from __future__ import annotations

from metricbert_trainer.metricbert.losses import LOSS_TYPES, InBatchLoss, Objective
from metricbert_trainer.metricbert.losses.mining import Anchors, Mining, NegativePool


def title_description_loss(objective: Objective | str, mining: Mining | str = Mining.RANDOM) -> InBatchLoss:
    """``objective``'s loss (its default settings) anchored on titles, with descriptions of other
    items of the batch as negatives, chosen by ``mining``."""
    return LOSS_TYPES[Objective(objective)](
        anchors=Anchors.TITLE, negative_pool=NegativePool.OTHER_FIELD, mining=Mining(mining)
    )
