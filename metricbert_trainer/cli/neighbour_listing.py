"""What ``metricbert recommend --item`` prints: the item, its ranking, what the numbers mean, and
its neighbours nearest first. Shared by the answer that prepares the ranking (``recommend``) and
the one read from a kept index (``indexed_recommend``), which imports nothing heavy."""

from __future__ import annotations

from collections.abc import Sequence

from metricbert_trainer.data.text_safety import shown
from metricbert_trainer.publishing.markdown import markdown_table

WITHOUT_SIMILARITY = (
    "Nearest first. This ranking adds up scores standardised per item, so it has no similarity "
    "to print; --tfidf-weight 0 --shared-neighbours 0 ranks by the model alone and prints its "
    "similarity (0 to 1)."
)


def similarity_sentence(views: Sequence[str], *, joined: bool) -> str:
    """What the similarity printed for a ranking by the model alone means, over its ``views``
    (``joined``: one view of the fields joined)."""
    compared = "the fields joined" if joined else " and ".join(f"{view} to {view}" for view in views)
    averaged = ", averaged" if len(views) > 1 else ""
    return (
        f"Similarity: 1 - the model's angular distance ({compared}{averaged}), from 0 to 1: "
        "1 the same direction, 0.5 at right angles (unrelated), 0 opposite."
    )


def neighbour_listing(
    item: tuple[str, str],
    ranking: str,
    neighbours: Sequence[tuple[str, str]],
    *,
    similarity: str | None = None,
    similarities: Sequence[float] = (),
) -> str:
    """The text of ``item`` (its id and title) and its ``neighbours`` (id, title), nearest first,
    ranked by ``ranking`` (its label); with a ``similarity`` sentence, each neighbour's similarity
    from ``similarities``. Ids and titles reach the terminal escaped: no catalog text can run an
    escape sequence there (``text_safety.shown``)."""
    item_id, title = item
    lines = [f"Most similar to {shown(title)} (id {shown(item_id)}), by {ranking}."]
    rows = [[rank, shown(id_), shown(title_)] for rank, (id_, title_) in enumerate(neighbours, 1)]
    headers = ["Rank", "Id", "Title"]
    if similarity is None:
        lines.append(WITHOUT_SIMILARITY)
    else:
        lines.append(similarity)
        for row, value in zip(rows, similarities, strict=True):
            row.append(f"{value:.3f}")
        headers.append("Similarity")
    return "\n".join([*lines, "", markdown_table(headers, rows, align="rllr"[: len(headers)])])
