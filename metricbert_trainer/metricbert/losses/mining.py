"""In-batch negative mining for the triplet objective (MetricBERT section 3.1).

A batch of ``B`` items with two fields gives ``2B`` elements laid out field-major: element
``i`` is item ``i``'s first field (its title), element ``B + i`` its second (its description).
An anchor's positive is the other field of the same item; its negative is chosen among the
remaining elements by the mining strategy.
"""

from __future__ import annotations

from enum import Enum

import torch


class Mining(str, Enum):
    """``hard``: the closest non-positive element (the paper's choice). ``random``: any
    non-positive element. ``semi_hard``: the closest element farther than the positive (FaceNet);
    when none is farther, the farthest one, as TensorFlow Addons does."""

    HARD = "hard"
    RANDOM = "random"
    SEMI_HARD = "semi_hard"


class NegativePool(str, Enum):
    """Which elements may serve as an anchor's negative. ``all``: every element except the
    anchor and its positive (the paper). ``other_field``: only the positive's field, so a title is
    contrasted with other items' descriptions; titles of similar items, which lie closer to each
    other than to any description, then stop being mined as negatives."""

    ALL = "all"
    OTHER_FIELD = "other_field"


class Anchors(str, Enum):
    """``both``: every element is an anchor with its sibling as the positive. ``title``: only the
    first field anchors, as in the paper's description."""

    BOTH = "both"
    TITLE = "title"


def anchor_and_positive_indices(num_items: int, anchors: Anchors | str) -> tuple[torch.Tensor, torch.Tensor]:
    """Element indices of the anchors and of their positives, for a field-major batch of two fields."""
    anchors = Anchors(anchors)
    titles = torch.arange(num_items)
    if anchors is Anchors.TITLE:
        return titles, titles + num_items
    return torch.cat([titles, titles + num_items]), torch.cat([titles + num_items, titles])


def negative_candidates(
    anchor_index: torch.Tensor, positive_index: torch.Tensor, num_elements: int, pool: NegativePool | str
) -> torch.Tensor:
    """A boolean [A, N] mask of the elements each anchor may take as its negative."""
    pool = NegativePool(pool)
    elements = torch.arange(num_elements, device=anchor_index.device)
    allowed = (elements[None, :] != anchor_index[:, None]) & (elements[None, :] != positive_index[:, None])
    if pool is NegativePool.OTHER_FIELD:
        num_items = num_elements // 2
        allowed &= (elements[None, :] // num_items) == (positive_index[:, None] // num_items)
    return allowed


def mine_negatives(
    distances: torch.Tensor,
    allowed: torch.Tensor,
    positive_distance: torch.Tensor,
    mining: Mining | str,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Picks one negative element per anchor.

    Args:
        distances: [A, N] distances from each anchor to every element.
        allowed: [A, N] mask of admissible negatives (see ``negative_candidates``).
        positive_distance: [A] distance from each anchor to its positive.
        mining: the strategy.
        generator: randomness for ``random`` mining.
    Returns:
        [A] element indices of the negatives.
    """
    mining = Mining(mining)
    if not bool(allowed.any(dim=1).all()):
        raise ValueError("An anchor has no admissible negative: a batch needs at least two items.")
    with torch.no_grad():
        distances = distances.detach()
        if mining is Mining.HARD:
            return distances.masked_fill(~allowed, float("inf")).argmin(dim=1)
        if mining is Mining.RANDOM:
            scores = torch.rand(distances.shape, generator=generator, device="cpu").to(distances.device)
            return scores.masked_fill(~allowed, -1.0).argmax(dim=1)
        farther = allowed & (distances > positive_distance.detach()[:, None])
        semi_hard = distances.masked_fill(~farther, float("inf")).argmin(dim=1)
        farthest = distances.masked_fill(~allowed, float("-inf")).argmax(dim=1)
        return torch.where(farther.any(dim=1), semi_hard, farthest)
