"""A guard against forgetting: keep the batch's similarity structure close to the starting model's.

Fine-tuning on one catalog's title/description pairs teaches the encoder that catalog's notion of
"belongs together", and with it can erode what the pretrained encoder knew about everything else
(on a held-out benchmark the plain recipe ended below its starting point, docs/quality.md). The
frozen starting encoder (``guide.StartingModelGuide``) already embeds every batch, so the cheapest
guard is relational knowledge distillation (Park et al., *Relational Knowledge Distillation*,
CVPR 2019; the in-batch form of Tian et al.'s contrastive distillation): for each anchor element
``a`` of the batch, the softmax over its cosine similarities to every other element, under the
model in training (``q_a``) and under the guide (``p_a``), and

    L_distill = mean_a KL(p_a || q_a)      with  p_a(j) = softmax_j(cos_guide(a, j) / T),  j != a, p(a)

where ``p(a)`` is the anchor's positive (the other field of its item). The positive is left out
because moving it is the metric term's job: where the starting model matches titles to their
descriptions poorly (wine titles), a distribution that includes the positive makes the guard
fight the very pull that training is for (docs/quality.md measured it). What remains is how each
element relates to the *other* items (no absolute position): the item-to-item neighbourhood that
ranking reads, kept as the pretrained encoder drew it. ``include_positive`` restores the plain
relational form.

``within_field`` narrows the distributions further, to the anchor's own field (a title against the
other titles, a description against the other descriptions): Metric_Inf reads only those
distances, while the cross-field ones are what the metric term rewrites (a title against other
items' descriptions is exactly where its mined negatives come from), so a guard on them opposes
every push of the metric term as well as every drift.

``anchor_weights`` scales each anchor's term. ``DistillWeighting.GUIDE_CONFIDENCE`` weighs an
anchor by how surely the starting model already matches it to its own positive
(``guide_positive_confidence``): where the pretrained encoder finds an item's description from its
title, the metric term has little to teach about that item and mostly pushes it away from its
nearest neighbours, which are often the similar items, so its neighbourhood is held; where the
starting model cannot match the fields, the neighbourhood is what training has to change, so it
is left free. The guard's overall strength then follows the catalog without a threshold: the
starting model matches nearly every Debian package's anchor in a batch and few wine reviews'
(docs/quality.md). The trainer squares the probability by default (``distill_confidence_power``):
over a batch the probabilities of the unmatched anchors are small but many, and they made up a
large share of the wine weight; squared, a sure match keeps nearly all of its weight and a
doubtful one little.
"""

from __future__ import annotations

from enum import Enum

import torch
import torch.nn.functional as F

from metricbert_trainer.base.distances import cosine_matrix
from metricbert_trainer.base.distributed import ProcessShard, share_of_global_mean


class DistillWeighting(str, Enum):
    """How the anchors of the distillation term are weighted: all alike, or by the guide's confidence
    that the anchor's nearest element is its own positive (``guide_positive_confidence``)."""

    UNIFORM = "uniform"
    GUIDE_CONFIDENCE = "guide_confidence"


def own_positive(rows: torch.Tensor, count: int) -> torch.Tensor:
    """The index of each row's own positive in a field-major batch of ``count`` elements: the same
    item's other field, half the batch away."""
    return (rows + count // 2) % count


def guide_positive_confidence(guide_elements: torch.Tensor, *, temperature: float) -> torch.Tensor:
    """Per element of a field-major batch, the guide's softmax probability of its own positive.

    The softmax runs over the element's cosine similarities to every other element of the batch
    (both fields, itself left out) at ``temperature``: near 1 when the starting model places the
    item's other field clearly nearest, near 0 when other items' titles or descriptions are nearer.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0; got {temperature}.")
    count = len(guide_elements)
    rows = torch.arange(count, device=guide_elements.device)
    with torch.no_grad():
        similarities = cosine_matrix(guide_elements, guide_elements)
        similarities = similarities.masked_fill(F.one_hot(rows, count).bool(), float("-inf"))
        probabilities = F.softmax(similarities / temperature, dim=-1)
    return probabilities[rows, own_positive(rows, count)]


def relational_distillation(
    elements: torch.Tensor,
    guide_elements: torch.Tensor,
    *,
    temperature: float,
    include_positive: bool = False,
    within_field: bool = False,
    anchor_weights: torch.Tensor | None = None,
    shard: ProcessShard | None = None,
) -> torch.Tensor:
    """``L_distill`` over a batch laid out field-major ([titles; descriptions], ``[2B, H]`` each).

    ``guide_elements`` are the same elements embedded by the frozen starting model (no gradient).
    Every element anchors, its KL term scaled by ``anchor_weights`` (one per element) when given;
    the result stays a mean over all anchors, so weights below 1 weaken the guard. With ``shard``
    (a batch gathered from every process) only this process's elements anchor, against every
    gathered element, and the result is this process's share of the global mean
    (``distributed.share_of_global_mean``).
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0; got {temperature}.")
    items = len(elements) // 2
    rows = torch.arange(len(elements), device=elements.device)
    if shard is not None:
        rows = rows[shard.owns(rows % items)]
    left_out = F.one_hot(rows, len(elements)).bool()
    if within_field:
        field_of = torch.arange(len(elements), device=elements.device) // items
        left_out |= field_of[rows][:, None] != field_of[None, :]
    elif not include_positive:
        left_out |= F.one_hot(own_positive(rows, len(elements)), len(elements)).bool()
    # Each row distributes over every element but itself, its positive unless included, and the
    # other field's elements when within_field: known from the shapes, without reading the mask.
    candidates = items - 1 if within_field else len(elements) - (1 if include_positive else 2)
    if len(rows) == 0 or candidates < 2:
        # Fewer than two elements to distribute over: nothing to distill.
        return share_of_global_mean(elements.sum() * 0.0, 0, shard)
    student = cosine_matrix(elements[rows], elements).masked_fill(left_out, float("-inf")) / temperature
    with torch.no_grad():
        teacher = cosine_matrix(guide_elements[rows], guide_elements).masked_fill(left_out, float("-inf"))
        teacher = F.softmax(teacher / temperature, dim=-1)
    log_student = F.log_softmax(student, dim=-1).masked_fill(left_out, 0.0)
    log_teacher = torch.log(teacher.clamp_min(1e-30)).masked_fill(left_out, 0.0)
    per_anchor = (teacher * (log_teacher - log_student)).sum(dim=-1)
    if anchor_weights is not None:
        per_anchor = per_anchor * anchor_weights[rows]
    return share_of_global_mean(per_anchor.sum(), len(rows), shard)
