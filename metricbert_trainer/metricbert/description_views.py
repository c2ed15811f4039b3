"""Views inside an item: spans of each description, paired with the whole description or with each other.

``Metric_Inf`` ranks items by title-to-title plus description-to-description distances, yet the
paper's triplet term only teaches the distance across fields (an item's title against its own
description). A long description says more than one pair per epoch can carry. A contiguous
window of its words, drawn anew each time the item is batched, is a second view of the same
item inside the description field (the random crops of Contriever, Izacard et al. 2022): the
view term pulls it towards its partner and away from the other items' views and partners, which
shapes the very distances the description half of ``Metric_Inf`` reads. Its partner
(``ViewPartner``) is the whole description, or a second window from the other half of the
description, which shares no words with the first and is the harder pair.

A view of the whole description holds at most half of its words, so it is never the whole text;
each of a pair of windows holds at most its half. Every view holds at most ``max_words``, so that
its extra encoding stays cheap beside the description's own.
"""

from __future__ import annotations

from enum import Enum

import torch

# The batch slots of the views, beside the catalog's two fields.
DESCRIPTION_VIEW = "description_view"
SECOND_DESCRIPTION_VIEW = "description_view_2"


class ViewPartner(str, Enum):
    """What a description view is paired with: the item's whole description, or a second window
    of words from the other half of the same description."""

    DESCRIPTION = "description"
    VIEW = "view"


def _window(words: list[str], length: int, generator: torch.Generator) -> str:
    """``length`` contiguous words of ``words`` from a start drawn from ``generator``."""
    if len(words) <= length:
        return " ".join(words)
    start = int(torch.randint(len(words) - length + 1, (1,), generator=generator))
    return " ".join(words[start : start + length])


def description_view(description: str, max_words: int, generator: torch.Generator) -> str:
    """A window of contiguous whitespace-separated words of ``description``: as many as half of
    its words, at most ``max_words`` and at least one, starting at a position drawn from
    ``generator``. An empty description gives an empty view."""
    if max_words < 1:
        raise ValueError(f"max_words must be at least 1; got {max_words}.")
    words = description.split()
    return _window(words, max(1, min(max_words, len(words) // 2)), generator)


def disjoint_description_views(
    description: str, max_words: int, generator: torch.Generator
) -> tuple[str, str]:
    """Two windows of at most ``max_words`` contiguous words each, one from the first half of
    ``description``'s words and one from the second, so they never share a position. A
    one-word description gives that word twice."""
    if max_words < 1:
        raise ValueError(f"max_words must be at least 1; got {max_words}.")
    words = description.split()
    middle = max(1, len(words) // 2)
    halves = (words[:middle], words[middle:] or words[:middle])
    return tuple(_window(half, min(max_words, len(half)), generator) for half in halves)
