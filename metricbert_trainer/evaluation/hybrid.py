"""Hybrid ranking: an encoder's distances fused with TF-IDF's, each standardised per query.

An encoder and TF-IDF are wrong in different ways. The encoder knows that "crisp" and "fresh"
are alike but blurs rare names; TF-IDF rewards exactly the shared rare words (a grape, a
library, a producer) and knows no synonyms. On both development benchmarks the two together
rank better than either alone, before any training and after it (docs/quality.md, "Hybrid
ranking"), so the hybrid is what ``metricbert evaluate`` and ``metricbert recommend`` rank with
by default, and the baseline a trained model must beat.

The scales differ (a sum of angles against a sum of cosine distances, spread differently on
every catalog), so each scorer's row of distances is standardised on its own, over the query's
candidates (the query itself left out), before the weighted sum. A row with no spread (TF-IDF
for an item that shares no word with any other) standardises to zeros: it does not move the
ranking, and the other scorer decides.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from metricbert_trainer.data.catalog import Catalog
from metricbert_trainer.evaluation.neighbours import CONCAT, METRIC_INF
from metricbert_trainer.evaluation.ranking_rows import fuse_rows
from metricbert_trainer.evaluation.scorers import Scorer, TfidfScorer, VectorScorer

# TF-IDF's share of the fused score in the ranking of ``evaluate`` and ``recommend``. Chosen on the
# dev judgments of the category benchmarks and the expert-graded pools alike, for the zero-shot
# and the trained encoder, together with the shared-neighbour re-ranking that follows it, by a
# rule that lets it harm no benchmark beyond its noise (studies/ranking_defaults.py;
# docs/quality.md, "Expert judgments").
DEFAULT_TFIDF_WEIGHT = 0.3
# The views TF-IDF compares in that ranking, chosen with the weight by the same rule: the item's
# fields joined into one text (one vectoriser over title and description, so that a word the title
# shares with the other item's description counts), whatever views the encoder compares.
DEFAULT_TFIDF_MODE = CONCAT
# The TF-IDF views in words, as fused scorers' names and the study tables give them.
TFIDF_VIEWS = {CONCAT: "joined fields", METRIC_INF: "each field"}


@dataclass
class FusedScorer(Scorer):
    """The weighted sum of several scorers' standardised distance rows (``standardised_rows``).

    ``parts`` pairs each scorer with its weight; the weights need not sum to one, only their
    ratios change the ranking.
    """

    parts: tuple[tuple[Scorer, float], ...]
    name: str = "fused"

    def __post_init__(self) -> None:
        if not self.parts:
            raise ValueError("A fused scorer needs at least one scorer.")
        for scorer, weight in self.parts:
            if not (np.isfinite(weight) and weight >= 0):
                raise ValueError(f"The weight of {scorer.name} must be a finite number >= 0; got {weight}.")

    def distance_rows(self, catalog: Catalog, rows: Sequence[int]) -> np.ndarray:
        return self.row_ranker(catalog)(rows)

    def row_ranker(self, catalog: Catalog) -> Callable[[Sequence[int]], np.ndarray]:
        if not any(weight for _, weight in self.parts):
            raise ValueError(f"{self.name}: every weight is 0, so nothing ranks the items.")
        return fused_ranker([(scorer.row_ranker(catalog), weight) for scorer, weight in self.parts if weight])


def fused_ranker(
    parts: Sequence[tuple[Callable[[Sequence[int]], np.ndarray], float]],
) -> Callable[[Sequence[int]], np.ndarray]:
    """The row ranker of weighted row rankers' standardised rows (``FusedScorer.row_ranker``)."""
    return lambda rows: fuse_rows([(rank(rows), weight) for rank, weight in parts], rows)


def with_tfidf(
    scorer: VectorScorer,
    tfidf_weight: float = DEFAULT_TFIDF_WEIGHT,
    *,
    tfidf_mode: str | None = DEFAULT_TFIDF_MODE,
    tfidf_cache: str | Path | None = None,
) -> Scorer:
    """``scorer`` fused with TF-IDF, TF-IDF weighing ``tfidf_weight`` and the scorer
    ``1 - tfidf_weight``; ``scorer`` itself when the weight is 0. ``tfidf_mode``: the views TF-IDF
    compares (``metric_inf``: one vectoriser per field; ``concat``: one over the joined fields, whose
    shared words count across fields; the default); the scorer's own ``mode`` when None. ``tfidf_cache``: where
    the fitted TF-IDF is kept (``TfidfScorer.cache_path``)."""
    if not 0 <= tfidf_weight <= 1:
        raise ValueError(f"tfidf_weight must lie in [0, 1]; got {tfidf_weight}.")
    if tfidf_weight == 0:
        return scorer
    tfidf = TfidfScorer(mode=tfidf_mode or scorer.mode, cache_path=tfidf_cache)
    over = "" if tfidf.mode == scorer.mode else f" over {TFIDF_VIEWS.get(tfidf.mode, tfidf.mode)}"
    return FusedScorer(
        parts=((scorer, 1 - tfidf_weight), (tfidf, tfidf_weight)),
        name=f"{scorer.name} + TF-IDF {tfidf_weight:g}{over}",
    )
