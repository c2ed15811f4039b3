"""Pictures of a training run: the loss terms over the steps, and the catalog's embeddings in 2-D.

Both are PNGs written next to the model, for people who would rather look than read logs. The
embedding plot is a PCA of every item's vector (its fields' unit vectors side by side, the
space Metric_Inf ranks in), before and after training, coloured by a catalog column the user
names; with a useful column, training should pull same-coloured items together.

Figures are drawn on ``matplotlib.figure.Figure`` objects, without pyplot: no backend is chosen
and no global figure is kept, so importing or calling this leaves a notebook's plotting alone.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from metricbert_trainer.publishing.model_card import LOGGED_STATISTICS, logged_loss_terms, logged_steps

logger = logging.getLogger(__name__)

# The most frequent categories get these colours (tab10 without its grey); the rest are drawn
# light grey as "other".
CATEGORY_COLOURS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#bcbd22",
    "#17becf",
)


def plot_loss_terms(log_history: Sequence[Mapping[str, float]], path: str | Path) -> Path | None:
    """The loss and every ``*_loss`` term against the step (left), the mining statistics (right).
    Returns ``None`` (and writes nothing) when nothing was logged yet."""
    logged = logged_steps(log_history)
    if not logged:
        return None
    terms = ["loss", *logged_loss_terms(logged)]
    statistics = [name for name in LOGGED_STATISTICS if any(name in entry for entry in logged)]
    figure = Figure(figsize=(11, 4))
    losses, stats = figure.subplots(1, 2)
    for names, axes in ((terms, losses), (statistics, stats)):
        for name in names:
            points = [(entry["step"], entry[name]) for entry in logged if name in entry]
            axes.plot(*zip(*points, strict=True), marker="o", markersize=3, label=name)
        axes.set_xlabel("step")
        axes.grid(alpha=0.3)
        if names:
            axes.legend(fontsize=8)
    losses.set_title("Loss terms")
    stats.set_title("Mining statistics")
    return _save(figure, path)


def item_vectors_for_plot(views: Mapping[str, np.ndarray]) -> np.ndarray:
    """One row per item: each field's vector scaled to unit length, side by side."""
    return np.concatenate(
        [
            matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
            for matrix in views.values()
        ],
        axis=1,
    )


def plot_embedding_projection(
    projections: Mapping[str, np.ndarray], labels: Sequence[str], path: str | Path, *, column: str
) -> Path:
    """One PCA panel per entry of ``projections`` (e.g. ``{"before training": X0, "after
    training": X1}``, rows = items), points coloured by ``labels`` (the ``column`` values)."""
    counts = Counter(labels)
    shown = [name for name, _ in counts.most_common(len(CATEGORY_COLOURS))]
    figure = Figure(figsize=(6 * len(projections), 5.5))
    panels = figure.subplots(1, len(projections), squeeze=False)
    labels_array = np.asarray(labels, dtype=object)
    for axes, (title, vectors) in zip(panels[0], projections.items(), strict=True):
        points = principal_components(vectors)
        others = ~np.isin(labels_array, shown)
        axes.scatter(points[others, 0], points[others, 1], s=4, c="lightgrey", label="other")
        for name, colour in zip(shown, CATEGORY_COLOURS, strict=False):
            chosen = labels_array == name
            axes.scatter(
                points[chosen, 0], points[chosen, 1], s=6, c=colour, label=f"{name} ({counts[name]})"
            )
        axes.set_title(f"{title}: PCA of item embeddings")
        axes.set_xticks([])
        axes.set_yticks([])
    panels[0][-1].legend(title=column, fontsize=7, markerscale=2, loc="center left", bbox_to_anchor=(1, 0.5))
    return _save(figure, path)


def principal_components(vectors: np.ndarray, count: int = 2) -> np.ndarray:
    """The rows of ``vectors`` projected on their first ``count`` principal axes."""
    centred = vectors - vectors.mean(axis=0, keepdims=True)
    _, _, axes = np.linalg.svd(centred, full_matrices=False)
    return centred @ axes[:count].T


def _save(figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    return path


def plot_catalog_before_after(
    before: tuple,
    after: tuple,
    catalog,
    labels: Sequence[str],
    path: str | Path,
    *,
    column: str,
    max_length: int = 128,
    max_items: int = 2000,
    seed: int = 0,
    show_progress: bool = False,
    precision: str = "auto",
) -> Path:
    """Encodes up to ``max_items`` items (a fixed random sample) with the ``before`` and
    ``after`` ``(model, tokenizer)`` pairs and plots both projections side by side; on a CPU the
    two encodings take minutes, which ``show_progress`` draws as bars, and ``precision``
    (``encoding.inference_autocast``) can shorten: bf16's rounding does not show in a picture."""
    from metricbert_trainer.evaluation.encoding import encode_catalog, precision_label

    started = time.perf_counter()
    rows = np.sort(np.random.default_rng(seed).permutation(len(catalog))[:max_items])
    sample = dataclasses.replace(catalog, dataset=catalog.dataset.select(rows), fields=catalog.fields[:2])
    projections = {}
    for title, (model, tokenizer) in (("before training", before), ("after training", after)):
        logger.info(
            "Encoding %d items %s for the projection plot, in %s.",
            len(rows),
            title,
            precision_label(next(model.parameters()).device, precision),
        )
        vectors = encode_catalog(
            model, tokenizer, sample, max_length=max_length, show_progress=show_progress, precision=precision
        )
        projections[title] = item_vectors_for_plot(vectors)
    written = plot_embedding_projection(projections, [labels[i] for i in rows], path, column=column)
    logger.info(
        "Projection plot of %d items written to %s in %.1f s.",
        len(rows),
        written,
        time.perf_counter() - started,
    )
    return written
