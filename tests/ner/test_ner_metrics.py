"""The tagging metrics against cases computed by hand (seqeval's default, conlleval semantics)."""

from __future__ import annotations

import pytest

from metricbert_trainer.ner.metrics import entities, tagging_metrics
from metricbert_trainer.ner.tagging import TaggingError


def test_entities_follow_conlleval_rules():
    assert entities(["B-W", "I-W", "O", "B-V"]) == {("W", 0, 1), ("V", 3, 3)}
    # An I- after O, or after another type, opens an entity as B- would.
    assert entities(["O", "I-W", "I-W"]) == {("W", 1, 2)}
    assert entities(["B-W", "I-V", "I-V"]) == {("W", 0, 0), ("V", 1, 2)}
    # B- after B- of the same type: two entities.
    assert entities(["B-W", "B-W"]) == {("W", 0, 0), ("W", 1, 1)}
    assert entities(["O", "O"]) == set()
    with pytest.raises(TaggingError):
        entities(["X-W"])


def test_precision_recall_f1_exact_match_and_token_accuracy_by_hand():
    gold = [
        ["B-W", "I-W", "B-Y", "B-V", "O"],  # 3 entities
        ["B-W", "B-Y", "O"],  # 2 entities
    ]
    predicted = [
        ["B-W", "I-W", "B-Y", "B-V", "O"],  # all 3 right, exact
        ["B-W", "I-W", "O"],  # W spans 0-1 (wrong end), Y missed
    ]
    metrics = tagging_metrics(gold, predicted)
    # 3 correct of 4 predicted, of 5 gold; F1 = 2PR/(P+R) = 2*0.75*0.6/1.35.
    assert metrics["precision"] == pytest.approx(75.0)
    assert metrics["recall"] == pytest.approx(60.0)
    assert metrics["f1"] == pytest.approx(100 * 2 * 0.75 * 0.6 / 1.35)
    assert metrics["exact_match"] == pytest.approx(50.0)
    # 5 + 2 of 8 words.
    assert metrics["token_accuracy"] == pytest.approx(100 * 7 / 8)


def test_no_predicted_entities_scores_zero_not_nan():
    metrics = tagging_metrics([["B-W", "O"]], [["O", "O"]])
    assert metrics["precision"] == metrics["recall"] == metrics["f1"] == 0.0
    assert metrics["token_accuracy"] == 50.0


def test_lengths_must_match():
    with pytest.raises(ValueError, match="Title 0"):
        tagging_metrics([["O", "O"]], [["O"]])
