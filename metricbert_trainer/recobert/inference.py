"""RecoBERT's four-score inference, as a ``Scorer`` the ranking evaluation and the CLI can use.

For a seed ``s`` and a candidate ``m`` (Malkiel et al., 2020, section 3.2):

* ``Cos_D`` and ``Cos_T``: the cosine of the two items' description vectors and of their title
  vectors, each item encoded once as its own real pair ``(t_i, d_i)``;
* ``C_TDM(t_m, d_s)`` and ``C_TDM(t_s, d_m)``: the matching score of the two *cross* pairs, one
  forward each.

Each score is z-normalised over the seed's candidates and the four are summed with weights
``lambda_1..lambda_4``; higher is more similar, and the ``Scorer`` distance is minus that sum.
The cross pairs are what makes RecoBERT expensive (two forwards per seed and candidate), so
``rerank_top_k=K`` scores them for the K best candidates of ``lambda_1 Cos_D + lambda_2 Cos_T``
only: those K are ordered by the full sum, the rest follow in first-stage order. With K covering
the catalog the two modes agree exactly. Cross pairs are batched by length across all seeds, and
a pair two seeds share is scored once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from metricbert_trainer.base.pooling import mean_pool
from metricbert_trainer.data.catalog import Catalog
from metricbert_trainer.evaluation.encoding import inference_autocast, inference_session
from metricbert_trainer.evaluation.evaluator import RankingEvaluator
from metricbert_trainer.evaluation.scorers import Scorer
from metricbert_trainer.recobert.config import SCORE_NAMES
from metricbert_trainer.recobert.forward import PAIR_ENCODER_KEYS
from metricbert_trainer.recobert.pairs import encode_pairs
from metricbert_trainer.recobert.scores import tdm_score, z_normalise


@dataclass
class FourScores:
    """The raw inference scores of every (seed, item) pair, ``[num_seeds, N]`` each.

    The cross-pair scores are NaN where they were not computed (outside a re-ranked top K, and
    on the seed itself). ``distances`` combines them for any weights, so a study of the weights
    (RecoBERT's Table 3) scores the catalog once.
    """

    seeds: np.ndarray
    cos_description: np.ndarray
    cos_title: np.ndarray
    tdm_candidate_title: np.ndarray  # C_TDM(t_m, d_s)
    tdm_seed_title: np.ndarray  # C_TDM(t_s, d_m)

    @property
    def candidates(self) -> np.ndarray:
        """Every item but the seed itself."""
        valid = np.ones(self.cos_title.shape, dtype=bool)
        valid[np.arange(len(self.seeds)), self.seeds] = False
        return valid

    def first_stage(self, weights: Sequence[float]) -> np.ndarray:
        """``lambda_1 z(Cos_D) + lambda_2 z(Cos_T)`` over the candidates."""
        valid = self.candidates
        return weights[0] * z_normalise(self.cos_description, valid) + weights[1] * z_normalise(
            self.cos_title, valid
        )

    def top_candidates(self, k: int, weights: Sequence[float]) -> np.ndarray:
        """The ``k`` best candidates of each seed by ``first_stage(weights)``, as a boolean mask."""
        valid = self.candidates
        if k >= valid.shape[1] - 1:
            return valid
        first = np.where(valid, self.first_stage(weights), -np.inf)
        top = np.argpartition(-first, k - 1, axis=1)[:, :k]
        chosen = np.zeros_like(valid)
        np.put_along_axis(chosen, top, True, axis=1)
        return chosen & valid

    def reranked(self, k: int, weights: Sequence[float]) -> FourScores:
        """These scores as re-ranking the top ``k`` would have left them: cross scores elsewhere NaN.

        Lets a study derive every ``k`` up to the one it scored from a single scoring pass.
        """
        keep = self.top_candidates(k, weights)
        return FourScores(
            seeds=self.seeds,
            cos_description=self.cos_description,
            cos_title=self.cos_title,
            tdm_candidate_title=np.where(keep, self.tdm_candidate_title, np.nan),
            tdm_seed_title=np.where(keep, self.tdm_seed_title, np.nan),
        )

    def distances(self, weights: Sequence[float]) -> np.ndarray:
        """Minus the weighted sum of the z-normalised scores, as float32 ``[num_seeds, N]``.

        Candidates without cross scores (outside the re-ranked top K) are placed after every
        re-ranked one, in the order of their first-stage score. The seed's own entry is 0; rankers
        ignore it.
        """
        weights = _check_weights(weights)
        valid = self.candidates
        first = self.first_stage(weights)
        if weights[2] == 0 and weights[3] == 0:
            return np.where(valid, -first, 0.0).astype(np.float32)
        scored = valid & ~np.isnan(self.tdm_candidate_title) & ~np.isnan(self.tdm_seed_title)
        total = (
            first
            + weights[2] * z_normalise(self.tdm_candidate_title, scored)
            + weights[3] * z_normalise(self.tdm_seed_title, scored)
        )
        distances = np.where(scored, -total, 0.0)
        rest = valid & ~scored
        if rest.any():
            last_scored = np.where(scored, distances, -np.inf).max(axis=1, keepdims=True)
            first_rest = np.where(rest, -first, np.inf).min(axis=1, keepdims=True)
            offset = np.where(np.isfinite(last_scored), last_scored - first_rest + 1.0, 0.0)
            distances = np.where(rest, -first + offset, distances)
        return distances.astype(np.float32)


@dataclass
class RecoBertScorer(Scorer):
    """Ranks a catalog with a RecoBERT model's four-score inference (see the module docstring).

    ``model`` is the trained ``AutoModel`` (or an MLM checkpoint; its ``base_model`` is used) and
    ``fields`` the title and description columns (default: the catalog's first two).
    ``rerank_top_k=None`` (or 0) scores the cross pairs of every candidate. ``precision``:
    ``encoding.PRECISIONS``.
    """

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    weights: Sequence[float] = (1.0, 1.0, 1.0, 1.0)
    rerank_top_k: int | None = None
    fields: tuple[str, str] | None = None
    name: str = "RecoBERT"
    batch_size: int = 64
    max_length: int = 256
    precision: str = "auto"
    show_progress: bool = False

    def __post_init__(self) -> None:
        self.weights = _check_weights(self.weights)
        inference_autocast(torch.device("cpu"), self.precision)  # an unknown precision fails here
        if self.rerank_top_k and self.weights[0] == 0 and self.weights[1] == 0:
            raise ValueError(
                "Re-ranking picks candidates by Cos_D and Cos_T: give one of them a nonzero weight."
            )

    def distance_rows(self, catalog: Catalog, rows: Sequence[int]) -> np.ndarray:
        return self.scores(catalog, rows).distances(self.weights)

    def scores(self, catalog: Catalog, rows: Sequence[int]) -> FourScores:
        """The four raw scores from each item of ``rows`` to every item of ``catalog``."""
        title_field, description_field = self.fields or tuple(catalog.fields[:2])
        titles, descriptions = catalog.texts(title_field), catalog.texts(description_field)
        seeds = np.asarray(rows, dtype=np.int64)
        encoder = PairEncoder(
            self.model, self.tokenizer, titles, descriptions, self.batch_size, self.max_length, self.precision
        )
        every_item = np.arange(len(titles))
        title_vectors, description_vectors = encoder.vectors(
            every_item, every_item, progress=self._progress("Encoding items")
        )
        scores = FourScores(
            seeds=seeds,
            cos_description=description_vectors[seeds] @ description_vectors.T,
            cos_title=title_vectors[seeds] @ title_vectors.T,
            tdm_candidate_title=np.full((len(seeds), len(titles)), np.nan),
            tdm_seed_title=np.full((len(seeds), len(titles)), np.nan),
        )
        seed_rows, candidates = np.nonzero(self._cross_pairs(scores))
        seed_items = seeds[seed_rows]
        # Both cross pairs of every (seed, candidate), deduplicated: (t_m, d_s) then (t_s, d_m).
        title_index = np.concatenate([candidates, seed_items])
        description_index = np.concatenate([seed_items, candidates])
        unique, inverse = np.unique(title_index * len(titles) + description_index, return_inverse=True)
        pair_scores = encoder.tdm_scores(
            unique // len(titles), unique % len(titles), progress=self._progress("Scoring cross pairs")
        )[inverse.reshape(-1)]
        scores.tdm_candidate_title[seed_rows, candidates] = pair_scores[: len(candidates)]
        scores.tdm_seed_title[seed_rows, candidates] = pair_scores[len(candidates) :]
        return scores

    def _cross_pairs(self, scores: FourScores) -> np.ndarray:
        """Which (seed, item) pairs get cross scores: every candidate, or the first stage's top K."""
        if not self.rerank_top_k:
            return scores.candidates
        return scores.top_candidates(self.rerank_top_k, self.weights)

    def _progress(self, description: str) -> str | None:
        return description if self.show_progress else None


class PairEncoder:
    """Encodes (title, description) pairs of a catalog's texts in length-sorted batches.

    Pairs are given as index arrays into ``titles`` and ``descriptions``; batching pairs of similar
    length keeps padding low, which matters when a catalog's cross pairs number in the millions.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        titles: Sequence[str],
        descriptions: Sequence[str],
        batch_size: int = 64,
        max_length: int = 256,
        precision: str = "auto",
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1; got {batch_size}.")
        inference_autocast(torch.device("cpu"), precision)  # an unknown precision fails here
        self.precision = precision
        self.model, self.tokenizer = model, tokenizer
        self.titles, self.descriptions = list(titles), list(descriptions)
        self.batch_size, self.max_length = batch_size, max_length
        self.title_lengths = _token_counts(tokenizer, self.titles, max_length)
        self.description_lengths = _token_counts(tokenizer, self.descriptions, max_length)

    def vectors(
        self, title_index: np.ndarray, description_index: np.ndarray, *, progress: str | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """L2-normalised title and description vectors ``[P, H]`` of each pair, in pair order."""
        hidden = self.model.config.hidden_size
        titles = np.empty((len(title_index), hidden), dtype=np.float32)
        descriptions = np.empty((len(title_index), hidden), dtype=np.float32)
        for positions, title_vectors, description_vectors in self._pooled(
            title_index, description_index, progress
        ):
            titles[positions] = torch.nn.functional.normalize(title_vectors, dim=-1).numpy()
            descriptions[positions] = torch.nn.functional.normalize(description_vectors, dim=-1).numpy()
        return titles, descriptions

    def tdm_scores(
        self, title_index: np.ndarray, description_index: np.ndarray, *, progress: str | None = None
    ) -> np.ndarray:
        """``C_TDM`` of each pair, float64 ``[P]`` in pair order."""
        scores = np.empty(len(title_index), dtype=np.float64)
        for positions, title_vectors, description_vectors in self._pooled(
            title_index, description_index, progress
        ):
            scores[positions] = tdm_score(title_vectors, description_vectors).double().numpy()
        return scores

    def _pooled(
        self, title_index: np.ndarray, description_index: np.ndarray, progress: str | None
    ) -> Iterator[tuple[np.ndarray, torch.Tensor, torch.Tensor]]:
        title_index = np.asarray(title_index, dtype=np.int64)
        description_index = np.asarray(description_index, dtype=np.int64)
        lengths = self.title_lengths[title_index] + self.description_lengths[description_index]
        # Longest first: a batch that does not fit in memory fails at once, not at the end.
        order = np.argsort(-lengths, kind="stable")
        encoder = self.model.base_model
        bar = tqdm(total=len(order), desc=progress, unit="pair", disable=progress is None)
        try:
            with inference_session(self.model, self.precision) as device:
                for start in range(0, len(order), self.batch_size):
                    positions = order[start : start + self.batch_size]
                    batch = encode_pairs(
                        self.tokenizer,
                        [self.titles[i] for i in title_index[positions]],
                        [self.descriptions[i] for i in description_index[positions]],
                        max_length=self.max_length,
                    )
                    inputs = {name: batch[name].to(device) for name in PAIR_ENCODER_KEYS if name in batch}
                    hidden = encoder(**inputs).last_hidden_state.float()
                    titles = mean_pool(hidden, batch["title_mask"].to(device)).cpu()
                    descriptions = mean_pool(hidden, batch["description_mask"].to(device)).cpu()
                    yield positions, titles, descriptions
                    bar.update(len(positions))
        finally:
            bar.close()


@dataclass
class RecoBertRankingEvaluator(RankingEvaluator):
    """The ranking evaluator of a RecoBERT model in training: its four-score inference.

    ``rerank_top_k`` keeps an evaluation affordable (2 x seeds x K cross pairs); 0 or ``None``
    scores every candidate. ``show_progress`` shows the (minutes-long, on a CPU) scoring passes.
    """

    weights: Sequence[float] = (1.0, 1.0, 1.0, 1.0)
    rerank_top_k: int | None = 100
    max_length: int = 256
    show_progress: bool = False

    def scorer(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> Scorer:
        return RecoBertScorer(
            model,
            tokenizer,
            weights=self.weights,
            rerank_top_k=self.rerank_top_k,
            batch_size=self.batch_size,
            max_length=self.max_length,
            show_progress=self.show_progress,
        )


def _check_weights(weights: Sequence[float]) -> tuple[float, ...]:
    weights = tuple(float(weight) for weight in weights)
    if len(weights) != len(SCORE_NAMES):
        raise ValueError(f"Give {len(SCORE_NAMES)} weights ({', '.join(SCORE_NAMES)}); got {list(weights)}.")
    if any(weight < 0 for weight in weights) or not any(weights):
        raise ValueError(f"The weights must be >= 0 and not all 0; got {list(weights)}.")
    return weights


def _token_counts(tokenizer: PreTrainedTokenizerBase, texts: list[str], max_length: int) -> np.ndarray:
    """Tokens per text without special tokens, capped at ``max_length`` (for length-sorting pairs)."""
    if not texts:
        return np.zeros(0, dtype=np.int64)
    encoded = tokenizer(texts, add_special_tokens=False, truncation=True, max_length=max_length)
    return np.asarray([len(ids) for ids in encoded["input_ids"]], dtype=np.int64)
