"""Model selection without annotations: signals a user with no expert labels can still log.

Most catalogs come without expert judgements, so the ranking metrics cannot tell a user whether
training helped. Two signals need only the catalog, computed on items held out of training:

- **title-to-description retrieval** (``lf_t2d_mrr``, ``lf_t2d_recall@1``): each held-out title
  ranks every held-out description; the reciprocal rank of its own. It measures what training
  teaches (an item's fields belong together) on items training never saw, so it rises with real
  learning and falls with over-fitting.
- **agreement with the starting model** (``lf_start_agreement@k``): the share of each held-out
  item's ``k`` nearest held-out items (Metric_Inf) that the starting model also had among its
  ``k`` nearest. It measures forgetting: 100 before training, falling as training rewrites the
  neighbourhoods the pretrained encoder drew.

Neither is a verdict on its own. Across the runs of the two development benchmarks
(docs/quality.md), retrieval ordered the wine runs as the annotations did, and within a run its
best evaluation was the best checkpoint by the annotations on wines and one above the start on
Debian, where it is saturated near 99; agreement measures forgetting, so it always prefers the
start and is an alarm rather than a selector. So retrieval is the signal to select checkpoints by
(``metric_for_best_model: lf_t2d_mrr``) and agreement the one to watch. (An earlier ``lf_score``,
their mean, followed agreement and picked the untrained start on both benchmarks.)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from metricbert_trainer.base.distances import Distance, pairwise_distance
from metricbert_trainer.data.catalog import Catalog
from metricbert_trainer.evaluation.encoding import encode_texts

logger = logging.getLogger(__name__)

# Seed of the held-out draw: fixed, so runs with different training seeds share their held-out items.
HOLDOUT_SEED = 0


def holdout_split(num_items: int, holdout: int) -> tuple[list[int], list[int]]:
    """(training rows, held-out rows) of a catalog, ``holdout`` items drawn with ``HOLDOUT_SEED``.

    At most a fifth of the catalog is held out, and none when fewer than 20 items would be left
    to rank among.
    """
    holdout = min(holdout, num_items // 5)
    if holdout < 20:
        return list(range(num_items)), []
    held = np.sort(np.random.default_rng(HOLDOUT_SEED).permutation(num_items)[:holdout])
    kept = np.setdiff1d(np.arange(num_items), held)
    return kept.tolist(), held.tolist()


@dataclass
class LabelFreeEvaluator:
    """The label-free signals of a model on ``catalog``'s ``items`` (held out of training).

    Build it with ``from_start`` while the model is still the starting model: it keeps the
    starting model's neighbourhoods to measure agreement against.

    Example::

        train_rows, held = holdout_split(len(catalog), 256)
        evaluator = LabelFreeEvaluator.from_start(model, tokenizer, catalog, held)
        evaluator(model, tokenizer)  # {"lf_t2d_mrr": 31.2, "lf_start_agreement@10": 100.0, ...}
    """

    catalog: Catalog
    items: Sequence[int]
    start_neighbours: np.ndarray
    k: int = 10
    batch_size: int = 64
    max_length: int = 128

    @classmethod
    def from_start(
        cls,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        catalog: Catalog,
        items: Sequence[int],
        *,
        k: int = 10,
        batch_size: int = 64,
        max_length: int = 128,
    ) -> LabelFreeEvaluator:
        if len(items) <= k:
            raise ValueError(f"Label-free selection needs more than k={k} held-out items; got {len(items)}.")
        evaluator = cls(catalog, list(items), np.empty((0, k), dtype=np.int64), k, batch_size, max_length)
        logger.info(
            "Label-free signals: the starting model's neighbourhoods of %d held-out items.", len(items)
        )
        started = time.perf_counter()
        evaluator.start_neighbours = evaluator.nearest(evaluator.field_vectors(model, tokenizer))
        logger.info(
            "Label-free signals: the start's neighbourhoods took %.1f s.", time.perf_counter() - started
        )
        return evaluator

    def field_vectors(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> list[torch.Tensor]:
        """One ``[n, hidden]`` matrix per field for the held-out items."""
        columns = [self.catalog.texts(name) for name in self.catalog.fields]  # each read once
        return [
            torch.from_numpy(
                encode_texts(
                    model,
                    tokenizer,
                    [column[row] for row in self.items],
                    batch_size=self.batch_size,
                    max_length=self.max_length,
                    across_processes=True,
                )
            )
            for column in columns
        ]

    def nearest(self, vectors: list[torch.Tensor]) -> np.ndarray:
        """``[n, k]``: each held-out item's ``k`` nearest other held-out items under Metric_Inf."""
        distances = sum(pairwise_distance(view, view, Distance.ANGULAR) for view in vectors)
        distances.fill_diagonal_(float("inf"))
        return torch.topk(distances, self.k, dim=1, largest=False).indices.numpy()

    @property
    def description(self) -> str:
        """What one evaluation does, for the progress lines the trainer logs around it."""
        return f"label-free signals on {len(self.items)} held-out items"

    def __call__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> dict[str, float]:
        vectors = self.field_vectors(model, tokenizer)
        mrr, recall_at_1 = title_to_description_retrieval(vectors[0], vectors[1])
        agreement = neighbour_agreement(self.nearest(vectors), self.start_neighbours)
        return dict(zip(signal_names(self.k), (mrr, recall_at_1, agreement), strict=True))


def signal_names(k: int = 10) -> tuple[str, ...]:
    """The names of the signals an evaluator with neighbourhoods of ``k`` logs (without ``eval_``)."""
    return ("lf_t2d_mrr", "lf_t2d_recall@1", f"lf_start_agreement@{k}")


def title_to_description_retrieval(titles: torch.Tensor, descriptions: torch.Tensor) -> tuple[float, float]:
    """MRR and recall@1 (in percent) of each title's own description among all descriptions
    (row ``i`` of both belongs to item ``i``); ties count against the item."""
    distances = pairwise_distance(titles, descriptions, Distance.ANGULAR)
    own = distances.diagonal()[:, None]
    ranks = (distances <= own).sum(dim=1).double()  # its own description included: rank >= 1
    return float((100.0 / ranks).mean()), float((ranks == 1).double().mean() * 100.0)


def neighbour_agreement(neighbours: np.ndarray, reference: np.ndarray) -> float:
    """Mean share (in percent) of each row's neighbours that are among the reference row's."""
    shared = [len(np.intersect1d(row, other)) for row, other in zip(neighbours, reference, strict=True)]
    return float(np.mean(shared) / neighbours.shape[1] * 100.0)
