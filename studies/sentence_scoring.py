"""Sentence-level scoring of long descriptions, a study on the dev seeds.

Metric_Inf compares two descriptions by one mean-pooled vector each. A 300-token description
that covers several aspects (what a package does, which interface it has, what it depends on)
averages them into one point, and two items that share one aspect sit no closer than two that
share none. Sentence-level scoring (as in Aspire, Mysore et al., 2022) compares the sentences
instead: each sentence of one description is matched to its closest sentence of the other, and
the distance is the mean over those best matches, taken both ways and averaged (a symmetric
best match, so that neither item's length decides). Published untrained best-match baselines
scored below the single vector; the issue asks whether it earns its place here, with our
trained models, before it becomes anything but a study.

Every encoder of a benchmark file's tables (the zero-shot start and the default recipe's trained
models, ``outputs/quality``: run ``studies/quality_tables.py`` with that file first) ranks each
of its benchmarks' dev seeds, in both views, with these description distances (the title's
angular distance is added to each):

- ``metric_inf``: the description's one vector (today's scorer, the baseline);
- ``sentences``: the symmetric best match over its sentences, in place of the vector;
- ``metric_inf + sentences``: both, summed;
- ``metric_inf, description twice``: the one vector's distance counted twice, no sentences, the
  control for the sum above, which weighs the description twice against the title;
- ``windows``: one vector that reads the whole description, not its first ``max_length`` tokens:
  the description cut into windows of whole words that fit ``max_length``, each encoded, and
  their vectors averaged weighted by their token counts (the mean pooling of every token, with
  attention within a window). It differs from ``metric_inf`` only for descriptions longer than
  ``max_length``, and keeps one vector an item, so an index serves it as it serves Metric_Inf.

Each is ranked alone, in the hybrid with TF-IDF and in the hybrid re-ranked by shared
neighbours (the ranking of ``evaluate`` and ``recommend``), and ``dev_choice`` chooses within
each: a description distance replaces Metric_Inf only if it lowers no metric of any case. The
test seeds are never read.

    python studies/sentence_scoring.py            # ranks, writes docs/results/sentence_scoring.jsonl
    python studies/sentence_scoring.py --report   # the tables of the results file
    python studies/sentence_scoring.py --spec studies/held_out.yaml --results docs/results/sentence_scoring_pypi.jsonl
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
from dev_choice import (
    Gains,
    chosen_setting,
    gains_table,
    setting_gains,
    sweep_parser,
    swept_rows,
)
from quality_tables import (
    METRICS,
    QualitySpec,
    catalog_views,
    encoder_scorers,
    split_annotations,
)
from transformers import PreTrainedTokenizerBase

from metricbert_trainer.base.distances import Distance
from metricbert_trainer.data.catalog import Catalog
from metricbert_trainer.evaluation.encoding import encode_views
from metricbert_trainer.evaluation.evaluator import evaluate_distance_rows
from metricbert_trainer.evaluation.hybrid import DEFAULT_TFIDF_WEIGHT, FusedScorer
from metricbert_trainer.evaluation.neighbours import distance_rows
from metricbert_trainer.evaluation.scorers import EncoderScorer, Scorer, TfidfScorer
from metricbert_trainer.evaluation.shared_neighbours import (
    DEFAULT_NEIGHBOURS,
    DEFAULT_WEIGHT,
    SharedNeighbourScorer,
)

COMMAND = "python studies/sentence_scoring.py"
METRIC_INF = "metric_inf"
SENTENCES = "sentences"
BOTH = "metric_inf + sentences"
TWICE = "metric_inf, description twice"
WINDOWS = "windows"
DESCRIPTION_DISTANCES = (METRIC_INF, SENTENCES, BOTH, TWICE, WINDOWS)
RANKINGS = ("alone", "hybrid", "hybrid re-ranked")
# A piece of fewer words than this is no sentence of its own ("0 A.D.", "Features:"): it joins
# its neighbour.
MIN_SENTENCE_WORDS = 4
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
# Query items whose sentence similarities are held at a time ([their sentences, all sentences]).
QUERY_CHUNK = 64


def description_sentences(text: str) -> list[str]:
    """The sentences of ``text``: split after ``.``, ``!`` or ``?`` and white space; a piece of
    fewer than ``MIN_SENTENCE_WORDS`` words joins the sentence before it (the next one when it
    comes first). A text without an end mark is one sentence."""
    sentences: list[str] = []
    pending = ""
    for piece in (piece.strip() for piece in SENTENCE_END.split(text)):
        if not piece:
            continue
        if len(piece.split()) < MIN_SENTENCE_WORDS:
            if sentences:
                sentences[-1] = f"{sentences[-1]} {piece}"
            else:
                pending = f"{pending} {piece}".strip()
            continue
        sentences.append(f"{pending} {piece}".strip())
        pending = ""
    if pending:
        sentences.append(pending)
    return sentences or [text]


@dataclass(frozen=True)
class SentenceSets:
    """Every item's sentences as unit vectors, item after item: item ``i`` owns the rows
    ``starts[i]`` to ``starts[i + 1]`` of ``vectors``."""

    vectors: np.ndarray
    starts: np.ndarray

    @classmethod
    def from_items(cls, per_item: Sequence[np.ndarray]) -> SentenceSets:
        counts = np.array([len(vectors) for vectors in per_item])
        if (counts < 1).any():
            raise ValueError("Every item needs at least one sentence.")
        vectors = np.concatenate(per_item).astype(np.float32)
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return cls(vectors=vectors, starts=np.concatenate([[0], np.cumsum(counts)]))

    @property
    def counts(self) -> np.ndarray:
        return np.diff(self.starts)

    def rows_of(self, items: np.ndarray) -> np.ndarray:
        return np.concatenate([np.arange(self.starts[i], self.starts[i + 1]) for i in items])


def angle(cosines: np.ndarray) -> np.ndarray:
    """The angular distance of cosine similarities, in [0, 1]."""
    return np.arccos(np.clip(cosines, -1.0, 1.0)) / np.pi


def best_match_rows(sets: SentenceSets, rows: Sequence[int]) -> np.ndarray:
    """``[len(rows), N]``: the symmetric best-match angular distance between the sentences of
    each item of ``rows`` and every item's (this module's docstring)."""
    rows = np.asarray(rows, dtype=np.int64)
    out = np.empty((len(rows), len(sets.counts)), dtype=np.float32)
    item_starts = sets.starts[:-1]
    for begin in range(0, len(rows), QUERY_CHUNK):
        items = rows[begin : begin + QUERY_CHUNK]
        query_counts = sets.counts[items]
        query_starts = np.concatenate([[0], np.cumsum(query_counts)[:-1]])
        cosines = sets.vectors[sets.rows_of(items)] @ sets.vectors.T
        # Each query sentence's closest sentence of each item, averaged over the query's sentences.
        forward = np.add.reduceat(
            angle(np.maximum.reduceat(cosines, item_starts, axis=1)), query_starts, axis=0
        )
        forward /= query_counts[:, None]
        # Each item sentence's closest sentence of the query, averaged over the item's sentences.
        backward = np.add.reduceat(
            angle(np.maximum.reduceat(cosines, query_starts, axis=0)), item_starts, axis=1
        )
        backward /= sets.counts[None, :]
        out[begin : begin + len(items)] = (forward + backward) / 2
    return out


@dataclass
class SentenceMatchScorer(Scorer):
    """The title's angular distance plus a description distance of ``DESCRIPTION_DISTANCES``,
    from ``encoder``'s vectors and, for the sentence distances, its vectors of each description
    sentence (kept in ``sentence_cache``)."""

    encoder: EncoderScorer
    description: str
    sentence_cache: Path | None = None
    name: str = ""

    def __post_init__(self) -> None:
        if self.description not in DESCRIPTION_DISTANCES:
            raise ValueError(f"description must be one of {DESCRIPTION_DISTANCES}; got {self.description!r}.")
        self.name = self.name or f"{self.encoder.name} ({self.description})"

    def distance_rows(self, catalog: Catalog, rows: Sequence[int]) -> np.ndarray:
        return self.row_ranker(catalog)(rows)

    def row_ranker(self, catalog: Catalog) -> Callable[[Sequence[int]], np.ndarray]:
        title, description = catalog.fields[:2]
        vectors = self.encoder.item_vectors(catalog)
        kept = {title: vectors[title]}
        if self.description != SENTENCES:
            kept[description] = vectors[description]
        if self.description == METRIC_INF:
            return partial(distance_rows, kept, Distance.ANGULAR)
        if self.description == WINDOWS:
            kept[description] = self.window_vectors(catalog.texts(description))
            return partial(distance_rows, kept, Distance.ANGULAR)
        if self.description == TWICE:
            return lambda rows: (
                distance_rows(kept, Distance.ANGULAR, rows)
                + distance_rows({description: kept[description]}, Distance.ANGULAR, rows)
            )
        sets = self.sentence_sets(catalog.texts(description))
        return lambda rows: distance_rows(kept, Distance.ANGULAR, rows) + best_match_rows(sets, rows)

    def sentence_sets(self, descriptions: Sequence[str]) -> SentenceSets:
        per_item = [description_sentences(text) for text in descriptions]
        flat = [sentence for sentences in per_item for sentence in sentences]
        vectors = self.encoded_pieces("sentences", flat)
        ends = np.cumsum([len(sentences) for sentences in per_item])
        return SentenceSets.from_items(np.split(vectors, ends[:-1]))

    def window_vectors(self, descriptions: Sequence[str]) -> np.ndarray:
        """Each description's vector from its windows (``description_windows``), their vectors
        averaged weighted by token count."""
        encoder = self.encoder
        pieces, counts = zip(
            *(description_windows(encoder.tokenizer, text, encoder.max_length) for text in descriptions),
            strict=True,
        )
        vectors = self.encoded_pieces("windows", [piece for item in pieces for piece in item])
        weights = np.concatenate(counts).astype(np.float64)
        starts = np.concatenate([[0], np.cumsum([len(item) for item in pieces])[:-1]])
        summed = np.add.reduceat(vectors * weights[:, None], starts, axis=0)
        return (summed / np.add.reduceat(weights, starts)[:, None]).astype(np.float32)

    def encoded_pieces(self, kind: str, pieces: list[str]) -> np.ndarray:
        """The encoder's vectors of ``pieces`` (``kind``: sentences or windows), kept in a cache
        of their own beside ``sentence_cache`` (``windows-`` in place of its ``sentences-``)."""
        encoder = self.encoder
        cache = self.sentence_cache
        if cache is not None:
            cache = cache.with_name(cache.name.replace("sentences-", f"{kind}-", 1))
        return encode_views(
            encoder.model,
            encoder.tokenizer,
            {kind: pieces},
            batch_size=encoder.batch_size,
            max_length=encoder.max_length,
            cache_path=cache,
        )[kind]


def description_windows(
    tokenizer: PreTrainedTokenizerBase, text: str, max_length: int
) -> tuple[list[str], list[int]]:
    """``text`` cut into consecutive pieces of whole words, each of at most ``max_length`` tokens
    with the special tokens the encoder adds, and each piece's token count: the whole text when
    it fits. A piece ends before the word that would not fit, so it tokenizes as it did within the
    text; a single word longer than a window is cut inside it."""
    encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    offsets, words = encoding["offset_mapping"], encoding.word_ids()
    room = max_length - tokenizer.num_special_tokens_to_add()
    if len(offsets) <= room:
        return [text], [max(len(offsets), 1)]
    pieces, counts = [], []
    start = 0
    while start < len(offsets):
        stop = min(start + room, len(offsets))
        if stop < len(offsets):
            # End before the word the window would cut, unless that word began the window.
            word_start = stop
            while word_start > start and words[word_start] == words[word_start - 1]:
                word_start -= 1
            stop = word_start if word_start > start else stop
        pieces.append(text[offsets[start][0] : offsets[stop - 1][1]])
        counts.append(stop - start)
        start = stop
    return pieces, counts


def ranked(scorer: Scorer, ranking: str) -> Scorer:
    """``scorer`` alone, in the hybrid, or in the hybrid re-ranked, at the commands' defaults."""
    if ranking == "alone":
        return scorer
    hybrid = FusedScorer(
        parts=((scorer, 1 - DEFAULT_TFIDF_WEIGHT), (TfidfScorer(), DEFAULT_TFIDF_WEIGHT)),
        name=f"{scorer.name} + TF-IDF",
    )
    if ranking == "hybrid":
        return hybrid
    return SharedNeighbourScorer(hybrid, DEFAULT_NEIGHBOURS, DEFAULT_WEIGHT)


def dev_rows(spec: QualitySpec, models_dir: Path) -> list[dict]:
    """One row per (benchmark, view, encoder, training seed, description distance, ranking) on
    the dev seeds."""
    rows = []
    for benchmark in spec.benchmarks:
        views = catalog_views(benchmark)
        dev = split_annotations(benchmark, views["plain"])["dev"]
        for name, seed, view, encoder in encoder_scorers(spec, benchmark, models_dir, views):
            cache = Path(encoder.cache_path).with_name(f"sentences-{Path(encoder.cache_path).name}")
            for description in DESCRIPTION_DISTANCES:
                scorer = SentenceMatchScorer(encoder, description, sentence_cache=cache)
                for ranking in RANKINGS:
                    metrics = evaluate_distance_rows(
                        ranked(scorer, ranking).distance_rows(views[view], dev.seeds), dev
                    )
                    rows.append(
                        {
                            "benchmark": benchmark.name,
                            "view": view,
                            "model": name,
                            "train_seed": seed,
                            "description": description,
                            "ranking": ranking,
                            "metrics": {metric: round(float(metrics[metric]), 4) for metric in METRICS},
                        }
                    )
    return rows


def gains(rows: Sequence[dict], ranking: str) -> Gains:
    """description distance -> (benchmark, view, model) -> metric -> mean over training seeds of
    the metric minus Metric_Inf's own, within ``ranking``."""
    within = [row for row in rows if row["ranking"] == ranking]
    return setting_gains(within, lambda row: row["description"], baseline=METRIC_INF)


def chosen(by_description: Gains) -> str:
    """``dev_choice.chosen_setting``: Metric_Inf is the baseline and the current scorer."""
    return chosen_setting(by_description, baseline=METRIC_INF, current=METRIC_INF)


def table(by_description: Gains) -> str:
    return gains_table(by_description, METRIC_INF, ["description distance"], lambda setting: [setting])


def main(argv: list[str] | None = None) -> None:
    parser = sweep_parser(__doc__, "docs/results/sentence_scoring.jsonl")
    options = parser.parse_args(argv)
    rows = swept_rows(options, dev_rows)
    # The command that gives these tables again: the script and the options not at their default.
    given = [
        f"--{name} {getattr(options, name)}"
        for name in ("spec", "results")
        if getattr(options, name) != parser.get_default(name)
    ]
    command = " ".join([COMMAND, *given])
    for ranking in RANKINGS:
        by_description = gains(rows, ranking)
        cases = len(next(iter(by_description.values())))
        print(
            f"Dev seeds, ranked {ranking}; gain over Metric_Inf's one description vector, mean and "
            f"smallest over {cases} (benchmark, view, encoder) cases; produced by `{command}`:\n\n"
            f"{table(by_description)}\n\nChosen: {chosen(by_description)}.\n"
        )


if __name__ == "__main__":
    main()
