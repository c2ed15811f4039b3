"""Titles as words with BIO tags: splitting, locating entity spans, and aligning tags with word pieces.

A tagged title is a list of words and one BIO tag per word (``B-WINERY``, ``I-WINERY``, ``O``),
CoNLL-style. Words are split the way BERT's basic tokenizer splits text (runs of word characters,
and each punctuation mark alone), so the words a model is trained on are the ones
``pipeline("token-classification")`` sees when it tokenizes the raw title. Entities given as
character spans become word tags here (``spans_to_tags``), and the model's labels come from the
word tags by labelling the first word piece of each word and nothing else (``align_labels``), as
the transformers token-classification examples do.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from metricbert_trainer.errors import UsageError

# A word: a run of letters, digits or underscores, or one other visible character.
WORD_PATTERN = re.compile(r"\w+|[^\w\s]")
OUTSIDE = "O"
# The label of positions a loss and a metric skip: special tokens, padding, later word pieces.
IGNORED_LABEL = -100


class TaggingError(UsageError):
    """Tags that do not fit their text: a length mismatch, an unknown tag, a span off word bounds."""


@dataclass(frozen=True)
class Span:
    """An entity: characters ``start`` to ``end`` (exclusive) of a text, and its type (``WINERY``)."""

    start: int
    end: int
    label: str

    def overlaps(self, other: Span) -> bool:
        return self.start < other.end and other.start < self.end


def split_words(text: str) -> list[tuple[str, int, int]]:
    """``text``'s words with their character offsets: ``[(word, start, end), ...]``."""
    return [(match.group(), match.start(), match.end()) for match in WORD_PATTERN.finditer(text)]


def locate_span(
    text: str, value: str, label: str, *, taken: Iterable[Span] = (), last: bool = False
) -> Span | None:
    """Where ``value`` occurs in ``text`` as whole words, as a ``Span`` of type ``label``.

    An exact occurrence wins over a case-insensitive one; among several, the first (or with
    ``last`` the last) that overlaps none of the spans already ``taken``. ``None`` when there is
    none, so a caller can count and skip the text rather than tag it wrongly.
    """
    value = value.strip()
    if not value:
        return None
    words = split_words(text)
    starts, ends = {start for _, start, _ in words}, {end for _, _, end in words}
    taken = list(taken)
    folded_text, folded_value = text.lower(), value.lower()
    # lower() may change a string's length (a few non-ASCII letters); then only exact matches count.
    searches = [(text, value)]
    if len(folded_text) == len(text) and len(folded_value) == len(value):
        searches.append((folded_text, folded_value))
    for haystack, needle in searches:
        found = [
            Span(match.start(), match.start() + len(needle), label)
            for match in re.finditer(re.escape(needle), haystack)
        ]
        found = [
            span
            for span in found
            if span.start in starts and span.end in ends and not any(span.overlaps(other) for other in taken)
        ]
        if found:
            return found[-1] if last else found[0]
    return None


def spans_to_tags(text: str, spans: Sequence[Span]) -> tuple[list[str], list[str]]:
    """The words of ``text`` and their BIO tags for the entity ``spans``.

    Raises ``TaggingError`` when a span does not start and end on word boundaries or two spans overlap.
    """
    words = split_words(text)
    tags = [OUTSIDE] * len(words)
    ordered = sorted(spans, key=lambda span: span.start)
    for previous, span in zip(ordered, ordered[1:], strict=False):
        if previous.overlaps(span):
            raise TaggingError(f"Spans {previous} and {span} of {text!r} overlap.")
    for span in ordered:
        inside = [
            index for index, (_, start, end) in enumerate(words) if start >= span.start and end <= span.end
        ]
        if (
            not inside
            or words[inside[0]][1] != span.start
            or words[inside[-1]][2] != span.end
            or inside != list(range(inside[0], inside[-1] + 1))
        ):
            raise TaggingError(
                f"The span {span.start}-{span.end} ({text[span.start : span.end]!r}, {span.label}) of {text!r} "
                "does not start and end on word boundaries."
            )
        tags[inside[0]] = f"B-{span.label}"
        for index in inside[1:]:
            tags[index] = f"I-{span.label}"
    return [word for word, _, _ in words], tags


def split_tag(tag: str) -> tuple[str, str]:
    """``"B-WINERY"`` -> ``("B", "WINERY")``; ``"O"`` -> ``("O", "")``. Raises ``TaggingError``
    for anything that is not a BIO tag."""
    if tag == OUTSIDE:
        return OUTSIDE, ""
    prefix, _, entity = tag.partition("-")
    if prefix not in ("B", "I") or not entity:
        raise TaggingError(f"{tag!r} is not a BIO tag (O, B-TYPE or I-TYPE).")
    return prefix, entity


def check_tags(words: Sequence[str], tags: Sequence[str], where: str) -> None:
    """Raises ``TaggingError``, naming ``where`` (a file and row), unless there is one BIO tag per word."""
    if len(words) != len(tags):
        raise TaggingError(
            f"{where}: {len(words)} tokens but {len(tags)} tags; give exactly one tag per token."
        )
    for tag in tags:
        try:
            split_tag(tag)
        except TaggingError as error:
            raise TaggingError(f"{where}: {error}") from None


def label_names(entity_types: Iterable[str]) -> list[str]:
    """The model's labels: ``O``, then ``B-`` and ``I-`` of each entity type, sorted."""
    names = [OUTSIDE]
    for entity in sorted(set(entity_types)):
        names += [f"B-{entity}", f"I-{entity}"]
    return names


def align_labels(word_ids: Sequence[int | None], word_labels: Sequence[int]) -> list[int]:
    """One label per word piece: the word's label on its first piece, ``IGNORED_LABEL`` on later
    pieces and on special tokens and padding (``word_ids`` as a fast tokenizer's ``word_ids()``)."""
    labels, previous = [], None
    for word in word_ids:
        labels.append(IGNORED_LABEL if word is None or word == previous else word_labels[word])
        previous = word
    return labels
