"""Graded targets from a teacher stronger than the start: the starting encoder fused with TF-IDF.

On every development benchmark the untrained hybrid ranking (the frozen start's ``Metric_Inf``
and per-field TF-IDF, each standardised per query and summed with weights ``1 - w`` and ``w``,
``evaluation.hybrid``) ranks above the start alone, and above the recipe's trained model alone
(docs/quality.md). Its scores are therefore a label-free teacher that knows more than the
student's start, which is what pseudo-labelling needs (GPL, Wang et al. 2022: graded teacher
margins helped an already trained encoder where 0/1 pseudo-labels did not).

The term distils the teacher's item-to-item ranking over each batch, listwise:

    L_teacher = mean_i KL( softmax_k(-z_i(D_T(i, k)) / T) || softmax_k(-z_i(D_S(i, k)) / T) ),  k != i

with ``D_S(i, k) = d(title_i, title_k) + d(desc_i, desc_k)`` the student's ``Metric_Inf``,
``D_T = (1 - w) z(Metric_Inf of the frozen start) + w z(TF-IDF distance)`` and ``z_i`` the
standardisation of row ``i`` over the other items of the batch (a row without spread counts as
zeros, as in the hybrid ranking). Standardising the student's row as well makes the target free
of the student's scale: only the order and the gaps between the other items are taught, which is
all a ranking reads.

With a second frozen encoder (``teacher_encoder``), the encoders' share of ``D_T`` is the mean of
``z(Metric_Inf of the start)`` and ``z(Metric_Inf of that encoder)``: an ensemble, the one way to a
teacher stronger than the start that adds no label. With shared neighbours
(``teacher_shared_neighbours``, ``metricbert.shared_neighbours``), ``D_T`` becomes
``(1 - g) D_T + g z(-J)``, ``J`` the Jaccard overlap of the two items' neighbour sets in the whole
catalog: a teacher stronger than the start at the cost of one pass over the catalog's vectors.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from metricbert_trainer.base.distances import Distance, pairwise_distance
from metricbert_trainer.base.distributed import ProcessShard, share_of_global_mean


def standardised_rows(distances: torch.Tensor, left_out: torch.Tensor) -> torch.Tensor:
    """Each row minus its mean, over its standard deviation, both over the entries not left out
    (those become 0); a row with no spread becomes zeros."""
    kept = (~left_out).float()
    count = kept.sum(dim=1, keepdim=True).clamp_min(1.0)
    mean = (distances * kept).sum(dim=1, keepdim=True) / count
    centred = (distances - mean) * kept
    spread = (centred.pow(2).sum(dim=1, keepdim=True) / count).sqrt()
    return torch.where(spread > 1e-6, centred / spread.clamp_min(1e-6), torch.zeros_like(centred))


def item_distances(
    titles: torch.Tensor, descriptions: torch.Tensor, rows: torch.Tensor, distance
) -> torch.Tensor:
    """``Metric_Inf`` between the items ``rows`` and every item of the batch."""
    return pairwise_distance(titles[rows], titles, distance) + pairwise_distance(
        descriptions[rows], descriptions, distance
    )


def hybrid_teacher_distillation(
    titles: torch.Tensor,
    descriptions: torch.Tensor,
    guide_vectors: torch.Tensor,
    tfidf_distances: torch.Tensor,
    *,
    tfidf_weight: float,
    temperature: float,
    distance: Distance | str = Distance.ANGULAR,
    shard: ProcessShard | None = None,
    encoder_vectors: torch.Tensor | None = None,
    neighbour_overlaps: torch.Tensor | None = None,
    shared_neighbour_weight: float = 0.0,
) -> torch.Tensor:
    """``L_teacher`` over a batch of items: ``titles`` and ``descriptions`` from the model in
    training (``[B, H]`` each), ``guide_vectors`` the frozen start's ``[titles; descriptions]``
    (``[2B, H]``) and ``tfidf_distances`` the items' TF-IDF distances (``[B, B]``, per field
    summed). With ``shard`` (a batch gathered from every process) only this process's items
    anchor, and the result is its share of the global mean. ``encoder_vectors``: a second frozen
    encoder's ``[titles; descriptions]`` (``[2B, H']``), averaged with the start in the teacher.
    ``neighbour_overlaps``: the items' shared-neighbour overlaps (``[B, B]``, higher is nearer),
    weighing ``shared_neighbour_weight`` in the teacher."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0; got {temperature}.")
    if not 0 <= tfidf_weight <= 1:
        raise ValueError(f"tfidf_weight must be in [0, 1]; got {tfidf_weight}.")
    if not 0 <= shared_neighbour_weight <= 1:
        raise ValueError(f"shared_neighbour_weight must be in [0, 1]; got {shared_neighbour_weight}.")
    items = len(titles)
    rows = torch.arange(items, device=titles.device)
    if shard is not None:
        rows = rows[shard.owns(rows)]
    if len(rows) == 0 or items < 3:
        # Fewer than two other items to rank: nothing to distil.
        return share_of_global_mean(titles.sum() * 0.0, 0, shard)
    left_out = F.one_hot(rows, items).bool()
    with torch.no_grad():
        encoders = [guide_vectors] if encoder_vectors is None else [guide_vectors, encoder_vectors]
        ensemble = sum(
            standardised_rows(item_distances(vectors[:items], vectors[items:], rows, distance), left_out)
            for vectors in encoders
        ) / len(encoders)
        teacher = (1 - tfidf_weight) * ensemble + tfidf_weight * standardised_rows(
            tfidf_distances[rows], left_out
        )
        if neighbour_overlaps is not None:
            teacher = (1 - shared_neighbour_weight) * teacher + shared_neighbour_weight * standardised_rows(
                -neighbour_overlaps[rows], left_out
            )
        target = F.softmax((-teacher / temperature).masked_fill(left_out, float("-inf")), dim=-1)
    student = standardised_rows(item_distances(titles, descriptions, rows, distance), left_out)
    log_student = F.log_softmax((-student / temperature).masked_fill(left_out, float("-inf")), dim=-1)
    log_target = torch.log(target.clamp_min(1e-30))
    per_anchor = (target * (log_target - log_student).masked_fill(left_out, 0.0)).sum(dim=-1)
    return share_of_global_mean(per_anchor.sum(), len(rows), shard)
