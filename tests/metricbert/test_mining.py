import torch

from metricbert_trainer.base.distances import pairwise_distance
from metricbert_trainer.metricbert.losses.mining import (
    anchor_and_positive_indices,
    mine_negatives,
    negative_candidates,
)


def _angles(*degrees):
    radians = torch.tensor(degrees) * torch.pi / 180
    return torch.stack([torch.cos(radians), torch.sin(radians)], dim=1)


# Three items on the unit circle: titles at 0, 10 and 100 degrees, descriptions at 40, 60 and 200.
TITLES = _angles(0.0, 10.0, 100.0)
DESCRIPTIONS = _angles(40.0, 60.0, 200.0)


def _mine(mining, pool="all", anchors="both"):
    elements = torch.cat([TITLES, DESCRIPTIONS])
    anchor, positive = anchor_and_positive_indices(3, anchors)
    distances = pairwise_distance(elements[anchor], elements, "angular")
    allowed = negative_candidates(anchor, positive, len(elements), pool)
    positive_distance = distances[torch.arange(len(anchor)), positive]
    return anchor, positive, mine_negatives(distances, allowed, positive_distance, mining)


def test_positive_is_the_other_field_of_the_same_item():
    anchor, positive = anchor_and_positive_indices(3, "both")
    assert anchor.tolist() == [0, 1, 2, 3, 4, 5]
    assert positive.tolist() == [3, 4, 5, 0, 1, 2]
    assert anchor_and_positive_indices(3, "title")[1].tolist() == [3, 4, 5]


def test_hard_mining_picks_closest_non_positive_element():
    anchor, positive, negative = _mine("hard")
    # Title 0 (0 deg): title 1 at 10 deg is closest; its own description (40 deg) is excluded.
    # Title 1 (10 deg): title 0. Title 2 (100 deg): description 1 at 60 deg (40 deg away).
    # Description 0 (40 deg): description 1 (60 deg). Description 1: description 0.
    # Description 2 (200 deg): description 1 (60 deg) is 140 deg away, closer than anything else.
    assert negative.tolist() == [1, 0, 4, 4, 3, 4]
    assert not bool((negative == anchor).any()) and not bool((negative == positive).any())


def test_other_field_pool_takes_negatives_from_the_positives_field():
    _, _, negative = _mine("hard", pool="other_field")
    # Title anchors choose among other descriptions; description anchors among other titles.
    assert negative.tolist() == [4, 3, 4, 1, 2, 0]


def test_semi_hard_picks_closest_negative_farther_than_positive():
    _, _, negative = _mine("semi_hard")
    # Title 0: positive at 40 deg; farther candidates: description 1 (60), title 2 (100) -> description 1.
    assert negative[0].item() == 4


def test_random_mining_never_picks_anchor_or_positive():
    torch.manual_seed(0)
    for _ in range(50):
        anchor, positive, negative = _mine("random")
        assert not bool((negative == anchor).any()) and not bool((negative == positive).any())
