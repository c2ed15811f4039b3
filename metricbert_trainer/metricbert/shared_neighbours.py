"""Shared neighbours: a teacher that also knows each item's neighbourhood in the whole catalog.

The hybrid teacher (``losses.teacher``) scores two items by their own texts only. Two items of
one kind often share few words and sit a little apart for the encoder, yet have the *same* near
neighbours in the catalog; two items that merely share a rare word do not. Counting shared
nearest neighbours (Jarvis and Patrick, 1973; the k-reciprocal re-ranking of retrieval, Zhong et
al., 2017) turns the catalog's structure into a similarity of its own. Untrained, on the dev seeds
of both development benchmarks, adding it to today's teacher ranked above the teacher alone and
above every trained model of the default recipe alone (docs/quality.md, "Shared neighbours"), with
no second encoder: a teacher stronger than the start that costs seconds.

Before training, each catalog item's ``k`` nearest other items under the teacher's own ranking
over the whole catalog are listed once (``teacher_neighbour_lists``): the frozen start's
``Metric_Inf`` fused with word-piece TF-IDF, each standardised over the catalog, exactly as the
batch teacher fuses them over a batch. In each batch the teacher's fused distance then becomes

    (1 - g) * D_T(i, j) + g * z_i(-J(i, j)),   J(i, j) = |S_i & S_j| / |S_i | S_j|,

with ``S_i`` item ``i`` and its ``k`` neighbours and ``z_i`` the batch standardisation of
``losses.teacher``. Listing compares every item with every other (``N^2`` work, in chunks: seconds
at 10^4 items, a day at 10^6); ``teacher_candidate_lists`` searches each item's list among its
nearest items under the start instead (an HNSW index, re-scored by the teacher's whole ranking).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from scipy import sparse

from metricbert_trainer.base.collator import field_inputs, unmasked
from metricbert_trainer.base.distances import Distance, pairwise_distance
from metricbert_trainer.evaluation.candidate_lists import UnitViews, fused_candidate_lists
from metricbert_trainer.metricbert.guide import batch_token_keys
from metricbert_trainer.metricbert.losses.teacher import standardised_rows

# Items compared with the whole catalog at a time while the lists are built.
CHUNK = 512


def teacher_distance_rows(
    encoder_fields: Sequence[torch.Tensor],
    tfidf_fields: Sequence[sparse.csr_matrix],
    rows: torch.Tensor,
    *,
    tfidf_weight: float,
    distance: Distance | str = Distance.ANGULAR,
) -> torch.Tensor:
    """``[len(rows), N]``: the teacher's fused distances from the items ``rows`` to every catalog
    item, as the batch teacher fuses them over a batch (each part standardised over the row's other
    items); an item's distance to itself is ``inf``. ``encoder_fields``: the frozen start's
    vectors, ``[N, H]`` per field; ``tfidf_fields``: ``TokenTfidf.catalog_vectors`` per field, in
    the same order."""
    count = len(encoder_fields[0])
    itself = torch.zeros(len(rows), count, dtype=torch.bool)
    itself[torch.arange(len(rows)), rows] = True
    encoder = sum(pairwise_distance(vectors[rows], vectors, distance) for vectors in encoder_fields)
    # Each field's cosines of the rows' items with every item, from the sparse unit vectors.
    indices = rows.numpy()
    cosines = sum(torch.from_numpy((matrix[indices] @ matrix.T).toarray()) for matrix in tfidf_fields)
    tfidf = len(tfidf_fields) - cosines
    fused = (1 - tfidf_weight) * standardised_rows(encoder, itself) + tfidf_weight * standardised_rows(
        tfidf, itself
    )
    return fused.masked_fill(itself, torch.inf)


def teacher_neighbour_lists(
    encoder_fields: Sequence[torch.Tensor],
    tfidf_fields: Sequence[sparse.csr_matrix],
    *,
    tfidf_weight: float,
    neighbours: int,
    distance: Distance | str = Distance.ANGULAR,
    rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """``[len(rows), k]``: each of the items ``rows`` (every item by default), its ``neighbours``
    nearest other items under the teacher's ranking of the whole catalog, nearest first.
    ``encoder_fields``: the frozen start's vectors, ``[N, H]`` per field; ``tfidf_fields``:
    ``TokenTfidf.catalog_vectors`` per field, in the same order; distances from
    ``teacher_distance_rows``, ``CHUNK`` items at a time."""
    count = len(encoder_fields[0])
    if not 0 < neighbours < count:
        raise ValueError(f"{neighbours} neighbours per item need a catalog of more items; it has {count}.")
    lists = []
    for chunk in (torch.arange(count) if rows is None else rows).split(CHUNK):
        fused = teacher_distance_rows(
            encoder_fields, tfidf_fields, chunk, tfidf_weight=tfidf_weight, distance=distance
        )
        lists.append(fused.topk(neighbours, dim=1, largest=False).indices)
    return torch.cat(lists)


def teacher_candidate_lists(
    encoder_fields: Sequence[torch.Tensor] | UnitViews,
    tfidf_fields: Sequence[sparse.csr_matrix],
    *,
    tfidf_weight: float,
    neighbours: int,
    candidates: int,
    distance: Distance | str = Distance.ANGULAR,
    rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """``teacher_neighbour_lists`` of ``rows`` (every item by default) searched among each item's
    ``candidates`` nearest under the frozen start (a FAISS HNSW index of its vectors): the same
    fusion re-scores the candidates, each part standardised by its spread over a sample of the
    catalog (``candidate_lists``) instead of over the whole row, so ``N * candidates`` distances
    replace ``N^2``. ``encoder_fields`` may be the start's views already at unit length, side by
    side in one matrix (``candidate_lists.unit_rows_of``), which the search then reads as they are."""
    if isinstance(encoder_fields, UnitViews):
        encoder = encoder_fields
    else:
        encoder = {
            f"field {number}": vectors.float().numpy() for number, vectors in enumerate(encoder_fields)
        }
    tfidf = {f"field {number}": matrix for number, matrix in enumerate(tfidf_fields)}
    lists = fused_candidate_lists(
        [(distance, 1 - tfidf_weight, encoder), (Distance.COSINE, tfidf_weight, tfidf)],
        neighbours,
        candidates,
        backend="faiss",
        items=None if rows is None else rows.numpy(),
    )
    return torch.from_numpy(lists)


class SharedNeighbours:
    """The catalog's neighbour lists, and the batch items' shared-neighbour overlaps (``overlaps``).

    Batches carry token ids, not catalog rows, so each item is found by the token keys of its two
    fields (``token_rows.token_key``): a title and a description together name one item.
    """

    def __init__(self, lists: torch.Tensor, field_keys: Sequence[Sequence[bytes]]) -> None:
        """``field_keys``: the ``token_key`` of each catalog item's title and of its description
        (``TokenRows.keys`` of each field), row for row with ``lists``."""
        if len(field_keys) != 2:
            raise ValueError(
                "Shared neighbours find a batch's items by their title and description: two fields."
            )
        self.lists = lists
        self._rows = {pair: row for row, pair in enumerate(zip(*field_keys, strict=True))}

    def batch_rows(self, batch: dict[str, torch.Tensor], fields: tuple[str, ...]) -> torch.Tensor:
        """The catalog row of each item of ``batch`` (its unmasked title and description)."""
        keys = zip(*(batch_token_keys(unmasked(field_inputs(batch, name))) for name in fields), strict=True)
        rows = [self._rows.get(pair) for pair in keys]
        if None in rows:
            raise KeyError(
                "A batch item is not among the catalog's items whose neighbours were listed before training."
            )
        return torch.tensor(rows, dtype=torch.long, device=batch[f"{fields[0]}_input_ids"].device)

    def overlaps(self, rows: torch.Tensor) -> torch.Tensor:
        """``[B, B]`` Jaccard overlaps of the items ``rows``' neighbour sets, each set holding the
        item and its listed neighbours."""
        sets = torch.cat([rows[:, None], self.lists.to(rows.device)[rows]], dim=1)
        # The pairs of equal entries of two sets, counted as the product of how often each id is
        # in each: a [B, ids] x [ids, B] product instead of comparing B x B x K x K entries (21 ms
        # of a 2-core step with 51 entries a set). The counts are small whole numbers, exact in fp32.
        ids, slots = torch.unique(sets, return_inverse=True)
        counts = torch.zeros(len(sets), len(ids), device=sets.device)
        counts.scatter_add_(1, slots, torch.ones_like(slots, dtype=counts.dtype))
        with torch.autocast(sets.device.type, enabled=False):
            shared = counts @ counts.T
        return shared / (2 * sets.shape[1] - shared)
