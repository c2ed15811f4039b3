"""What a kept index (``item_index``) holds of a ranking: the ranking of ``evaluate`` and
``recommend`` (``cli.options.ranking_scorer``: an encoder, fused with TF-IDF, re-ranked by shared
neighbours) taken apart into the arrays one item's row is computed from.

The parts come from the scorers themselves, their caches included: the encoder's vectors and the
TF-IDF matrices scaled as the scorers scale them to rank (``neighbours.unit_view``), the lists as
the re-ranking lists them (``SharedNeighbourScorer.base_ranker_and_lists``). A ranking of another
shape (another distance, a baseline, a fusion of other scorers) is refused, not approximated.
"""

from __future__ import annotations

from metricbert_trainer.base.distances import COSINE_CLAMP, Distance
from metricbert_trainer.data.catalog import Catalog
from metricbert_trainer.evaluation.hybrid import FusedScorer
from metricbert_trainer.evaluation.item_index import IndexedRanking
from metricbert_trainer.evaluation.neighbours import unit_view
from metricbert_trainer.evaluation.scorers import EncoderScorer, Scorer, TfidfScorer
from metricbert_trainer.evaluation.shared_neighbours import SharedNeighbourScorer


def indexed_ranking(scorer: Scorer, catalog: Catalog) -> IndexedRanking:
    """The parts of ``scorer``'s ranking of ``catalog`` that an index keeps (``IndexedRanking``)."""
    lists, shared_weight, base = None, 0.0, scorer
    if isinstance(scorer, SharedNeighbourScorer):
        # The lists first: their search holds the base's prepared vectors, let go before the index's.
        _, lists = scorer.base_ranker_and_lists(catalog)
        shared_weight, base = scorer.weight, scorer.base
    encoder, tfidf, weights = encoder_of(scorer), None, (1.0, 0.0)
    if isinstance(base, FusedScorer):
        (_, encoder_weight), (tfidf, tfidf_weight) = base.parts
        weights = (encoder_weight, tfidf_weight)
    if tfidf is not None and not (
        isinstance(tfidf, TfidfScorer) and Distance(tfidf.distance) is Distance.COSINE
    ):
        raise ValueError(f"An index fuses TF-IDF by its cosine distance; {tfidf.name} is not that.")
    return IndexedRanking(
        encoder_views=[unit_view(view) for view in encoder.item_vectors(catalog).values()],
        cosine_clamp=COSINE_CLAMP,
        tfidf_views=[unit_view(view) for view in tfidf.item_vectors(catalog).values()] if tfidf else (),
        encoder_weight=weights[0],
        tfidf_weight=weights[1],
        lists=lists,
        shared_weight=shared_weight,
    )


def encoder_of(scorer: Scorer) -> EncoderScorer:
    """The encoder that ``scorer`` ranks by, alone, fused with TF-IDF (first of two parts) or
    re-ranked; ``ValueError`` for a ranking of another shape or distance."""
    base = scorer.base if isinstance(scorer, SharedNeighbourScorer) else scorer
    if isinstance(base, FusedScorer):
        if len(base.parts) != 2:
            raise ValueError(
                f"An index keeps an encoder fused with TF-IDF; {base.name} fuses {len(base.parts)} scorers."
            )
        base = base.parts[0][0]
    if not (isinstance(base, EncoderScorer) and Distance(base.distance) is Distance.ANGULAR):
        raise ValueError(f"An index keeps an encoder ranked by the angular distance; {base.name} is not one.")
    return base
