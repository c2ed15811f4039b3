"""Tagging metrics: entity-level precision, recall and F1, exact match of whole titles, token accuracy.

Entities are read from BIO tags with the conlleval rules that seqeval applies by default (its
non-strict mode): an ``I-X`` after ``O`` or after another type opens an entity as if it were
``B-X``, and an entity ends at ``O``, at a ``B-``, or where the type changes. An entity counts as
correct when its type, first and last word all match a gold entity; precision, recall and F1 are
micro-averaged over all titles and types. Written here rather than imported so the numbers do not
depend on another package's version; ``tests/ner/test_ner_metrics.py`` checks them on hand-computed cases.
Every value is a percentage, as in the multi-task NER paper's table.
"""

from __future__ import annotations

from collections.abc import Sequence

from metricbert_trainer.ner.tagging import OUTSIDE, split_tag

METRIC_NAMES = ("precision", "recall", "f1", "exact_match", "token_accuracy")


def entities(tags: Sequence[str]) -> set[tuple[str, int, int]]:
    """The entities of one tag sequence as ``(type, first word, last word)``."""
    found = set()
    start, previous_prefix, previous_type = None, OUTSIDE, ""
    for index, tag in enumerate([*tags, OUTSIDE]):
        prefix, entity = split_tag(tag)
        ends = previous_prefix != OUTSIDE and (prefix in ("B", OUTSIDE) or entity != previous_type)
        if start is not None and ends:
            found.add((previous_type, start, index - 1))
            start = None
        if prefix == "B" or (prefix == "I" and (previous_prefix == OUTSIDE or entity != previous_type)):
            start = index
        previous_prefix, previous_type = prefix, entity
    return found


def tagging_metrics(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> dict[str, float]:
    """``precision``, ``recall``, ``f1`` (entity level), ``exact_match`` (titles whose every tag is
    right) and ``token_accuracy`` (words whose tag is right, ``O`` included), in %, over titles
    given as lists of word tags."""
    if len(gold) != len(predicted):
        raise ValueError(f"Got {len(gold)} gold and {len(predicted)} predicted tag sequences.")
    correct = gold_count = predicted_count = exact = right_words = words = 0
    for index, (gold_tags, predicted_tags) in enumerate(zip(gold, predicted, strict=True)):
        if len(gold_tags) != len(predicted_tags):
            raise ValueError(
                f"Title {index}: {len(gold_tags)} gold tags but {len(predicted_tags)} predicted ones."
            )
        gold_entities, predicted_entities = entities(gold_tags), entities(predicted_tags)
        correct += len(gold_entities & predicted_entities)
        gold_count += len(gold_entities)
        predicted_count += len(predicted_entities)
        exact += list(gold_tags) == list(predicted_tags)
        right_words += sum(g == p for g, p in zip(gold_tags, predicted_tags, strict=True))
        words += len(gold_tags)
    precision = correct / predicted_count if predicted_count else 0.0
    recall = correct / gold_count if gold_count else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "precision": 100 * precision,
        "recall": 100 * recall,
        "f1": 100 * f1,
        "exact_match": 100 * exact / len(gold) if gold else 0.0,
        "token_accuracy": 100 * right_words / words if words else 0.0,
    }
