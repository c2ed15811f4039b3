"""Evaluating a scorer or a model in training on annotated similar items.

Only the seeds' rows of the distance matrix are needed (each seed against every item), so once
the catalog is encoded an evaluation is a few hundred thousand distances, not ``N x N``.
``RankingEvaluator`` is the callable the trainer runs at each evaluation; ``evaluate_scorer``
serves the CLI and the baselines, through the same ranking and metrics code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from metricbert_trainer.base.distances import Distance
from metricbert_trainer.base.distributed import first_process_value
from metricbert_trainer.data.annotations import Annotations
from metricbert_trainer.data.catalog import Catalog
from metricbert_trainer.data.graded_pools import GradedPools
from metricbert_trainer.evaluation.metrics import annotated_ranks, ranking_metrics
from metricbert_trainer.evaluation.neighbours import METRIC_INF, Matrix, catalog_views, distance_rows
from metricbert_trainer.evaluation.pool_metrics import PoolScores, pool_rows, pool_scores
from metricbert_trainer.evaluation.scorers import EncoderScorer, Scorer


def evaluate_vectors(
    vectors: Mapping[str, Matrix],
    distance: Distance | str,
    annotations: Annotations,
    *,
    ks: Sequence[int] = (10, 100),
) -> dict[str, float]:
    """Filtered (``mpr``, ``mrr``, ``hr@k``) and raw (``raw_*``) metrics of ranking by ``vectors``."""
    return evaluate_distance_rows(distance_rows(vectors, distance, annotations.seeds), annotations, ks=ks)


def evaluate_scorer(
    scorer: Scorer, catalog: Catalog, annotations: Annotations, *, ks: Sequence[int] = (10, 100)
) -> dict[str, float]:
    """Ranks ``catalog`` with ``scorer`` from each seed and returns its metrics on ``annotations``."""
    return evaluate_distance_rows(scorer.distance_rows(catalog, annotations.seeds), annotations, ks=ks)


def score_pools(scorer: Scorer, catalog: Catalog, pools: GradedPools) -> PoolScores:
    """Ranks each graded pool of ``pools`` with ``scorer`` and returns its per-pool metrics
    (``pool_metrics``); the scorer ranks from each query item once, whatever its facets."""
    queries = pools.queries
    return pool_scores(pool_rows(scorer.distance_rows(catalog, queries), queries, pools), pools)


def evaluate_distance_rows(
    rows: np.ndarray, annotations: Annotations, *, ks: Sequence[int] = (10, 100)
) -> dict[str, float]:
    """Metrics of distance rows ``[num_seeds, N]``, one per seed in ``annotations.seeds`` order."""
    seeds = annotations.seeds
    return ranking_metrics(rows, seeds, [annotations.similar[seed] for seed in seeds], ks)


@dataclass(frozen=True)
class SeedRanking:
    """What one seed's ranking looks like: its ``top`` items (indices, nearest first, the seed left
    out) and the raw rank of each of its annotated items (``annotations.similar[seed]`` order)."""

    seed: int
    top: np.ndarray
    annotated_ranks: np.ndarray


def seed_rankings(rows: np.ndarray, annotations: Annotations, *, top_k: int = 10) -> list[SeedRanking]:
    """Each seed's top ``top_k`` items and annotated items' ranks from distance rows ``[num_seeds, N]``
    (``annotations.seeds`` order), ranked as the metrics rank them (``metrics.annotated_ranks``)."""
    rankings = []
    for row, seed in zip(rows, annotations.seeds, strict=True):
        others = np.asarray(row, dtype=np.float64).copy()
        others[seed] = np.inf
        top = np.argsort(others, kind="stable")[: min(top_k, len(others) - 1)]
        raw, _ = annotated_ranks(row, seed, annotations.similar[seed])
        rankings.append(SeedRanking(seed=seed, top=top, annotated_ranks=raw.ranks))
    return rankings


@dataclass
class RankingEvaluator:
    """Ranking metrics of a model in training, as a flat dict the trainer prefixes with ``eval_``.

    ``mpr``, ``mrr`` and ``hr@k`` are the filtered variant (the primary numbers), ``raw_mpr``,
    ``raw_mrr`` and ``raw_hr@k`` the raw one; see ``metrics`` for the definitions.

    Example::

        evaluator = RankingEvaluator(catalog, load_annotations("proxy.csv", catalog))
        metrics = evaluator(model, tokenizer)  # {"mpr": 92.6, "mrr": 4.3, "hr@10": 9.7, ...}
    """

    catalog: Catalog
    annotations: Annotations
    mode: str = METRIC_INF
    batch_size: int = 64
    max_length: int = 128
    ks: tuple[int, ...] = (10, 100)

    def __post_init__(self) -> None:
        catalog_views(self.catalog, self.mode)  # an unknown mode fails here, not after training
        largest = max(
            max(self.annotations.similar), *(max(items) for items in self.annotations.similar.values())
        )
        if largest >= len(self.catalog):
            raise ValueError(
                f"The annotations {self.annotations.source} refer to items beyond the "
                f"{len(self.catalog)} of the catalog {self.catalog.source}; load them with this catalog."
            )

    def __call__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> dict[str, float]:
        scorer = self.scorer(model, tokenizer)
        if not isinstance(scorer, EncoderScorer) or not scorer.first_process_only:
            return evaluate_scorer(scorer, self.catalog, self.annotations, ks=self.ks)
        # Process 0 alone holds the catalog's vectors and ranks it from the seeds (at a million
        # items, 3 GB of MiniLM vectors, as much again scaled, and 2 GB of rows for 500 seeds): the
        # other processes encode their share and take its metrics.
        vectors = scorer.item_vectors(self.catalog)
        metrics = (
            None
            if vectors is None
            else evaluate_vectors(vectors, scorer.distance, self.annotations, ks=self.ks)
        )
        return first_process_value(metrics)

    @property
    def description(self) -> str:
        """What one evaluation does, for the progress lines the trainer logs around it."""
        views = len(catalog_views(self.catalog, self.mode))
        return (
            f"ranking {len(self.catalog)} items ({views} text view{'s' if views > 1 else ''}) "
            f"from {len(self.annotations.seeds)} annotated seeds"
        )

    def scorer(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> Scorer:
        """How the model in training ranks the catalog: its embeddings under ``mode``. The trainer
        evaluates on every process at once, so in a distributed run they share the encoding, and
        process 0 alone receives the vectors and ranks."""
        return EncoderScorer(
            model,
            tokenizer,
            mode=self.mode,
            batch_size=self.batch_size,
            max_length=self.max_length,
            across_processes=True,
            first_process_only=True,
        )


@dataclass
class SequentialEvaluator:
    """Several evaluators run one after the other, their metrics merged into one flat dict (as
    sentence-transformers' ``SequentialEvaluator``): the annotations' ranking metrics and the
    label-free signals of one evaluation, say."""

    evaluators: Sequence

    def __call__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> dict[str, float]:
        metrics: dict[str, float] = {}
        for evaluator in self.evaluators:
            metrics.update(evaluator(model, tokenizer))
        return metrics

    @property
    def description(self) -> str:
        return "; ".join(describe_evaluator(evaluator) for evaluator in self.evaluators)


def describe_evaluator(evaluator) -> str:
    """An evaluator's ``description``, or its type's name for a user's callable without one."""
    return getattr(evaluator, "description", None) or type(evaluator).__name__
