"""Words, span location and tag alignment with the real MiniLM tokenizer's word pieces."""

from __future__ import annotations

import pytest

from metricbert_trainer.ner.tagging import (
    IGNORED_LABEL,
    Span,
    TaggingError,
    align_labels,
    label_names,
    locate_span,
    spans_to_tags,
    split_words,
)

TITLE = "St. Julian 2013 Reserve Late Harvest Riesling (Lake Michigan Shore)"


def test_words_split_like_berts_basic_tokenizer(tokenizer):
    words = [word for word, _, _ in split_words(TITLE)]
    assert words[:4] == ["St", ".", "Julian", "2013"]
    assert words[-5:] == ["(", "Lake", "Michigan", "Shore", ")"]
    # The pipeline tokenizes the raw title; it must see the same words training saw.
    pieces = tokenizer(TITLE, add_special_tokens=False)
    assert max(pieces.word_ids()) + 1 == len(words)


def test_exact_match_is_located_on_word_boundaries():
    assert locate_span(TITLE, "St. Julian", "WINERY") == Span(0, 10, "WINERY")
    # "Harvest" inside a longer word would not count; "Late" is a whole word here.
    assert locate_span("Harvestmoon 2012 Late Harvest", "Harvest", "X") == Span(22, 29, "X")


def test_case_insensitive_match_when_no_exact_one():
    span = locate_span("Rainstorm 2013 PINOT GRIS (Willamette Valley)", "Pinot Gris", "VARIETY")
    assert span == Span(15, 25, "VARIETY")
    # An exact occurrence wins over an earlier case-insensitive one.
    assert locate_span("merlot and Merlot", "Merlot", "V") == Span(11, 17, "V")


def test_unlocatable_values_give_none():
    assert locate_span(TITLE, "Gewürztraminer", "VARIETY") is None
    assert locate_span(TITLE, "Julia", "WINERY") is None  # not a whole word
    assert locate_span(TITLE, "  ", "WINERY") is None


def test_taken_spans_and_last_occurrence():
    title = "Douro Boys 2015 Red (Douro)"
    region = locate_span(title, "Douro", "REGION", last=True)
    assert region == Span(21, 26, "REGION")
    assert locate_span(title, "Douro", "WINERY", taken=[region]) == Span(0, 5, "WINERY")
    assert locate_span("Douro (Douro)", "Douro", "X", taken=[Span(0, 5, "A"), Span(7, 12, "B")]) is None


def test_spans_become_bio_tags():
    words, tags = spans_to_tags(TITLE, [Span(0, 10, "WINERY"), Span(47, 66, "REGION")])
    assert list(zip(words, tags, strict=True))[:4] == [
        ("St", "B-WINERY"),
        (".", "I-WINERY"),
        ("Julian", "I-WINERY"),
        ("2013", "O"),
    ]
    assert tags[-5:] == ["O", "B-REGION", "I-REGION", "I-REGION", "O"]


def test_misaligned_and_overlapping_spans_are_errors():
    with pytest.raises(TaggingError, match="word boundaries"):
        spans_to_tags(TITLE, [Span(1, 10, "WINERY")])
    with pytest.raises(TaggingError, match="overlap"):
        spans_to_tags(TITLE, [Span(0, 10, "WINERY"), Span(4, 15, "VINTAGE")])


def test_only_the_first_word_piece_is_labelled(tokenizer):
    words = ["Gewurztraminer", "2013", "(", "Alsace", ")"]
    labels = label_names(["VARIETY", "VINTAGE", "REGION"])
    word_labels = [labels.index(tag) for tag in ["B-VARIETY", "B-VINTAGE", "O", "B-REGION", "O"]]
    encoded = tokenizer(words, is_split_into_words=True)
    aligned = align_labels(encoded.word_ids(), word_labels)
    pieces = tokenizer.convert_ids_to_tokens(encoded["input_ids"])
    assert pieces[0] == "[CLS]" and aligned[0] == IGNORED_LABEL and aligned[-1] == IGNORED_LABEL
    # "Gewurztraminer" is several pieces: the first carries B-VARIETY, the rest are ignored.
    variety = [position for position, word in enumerate(encoded.word_ids()) if word == 0]
    assert len(variety) > 1
    assert aligned[variety[0]] == labels.index("B-VARIETY")
    assert all(aligned[position] == IGNORED_LABEL for position in variety[1:])
    assert [label for label in aligned if label != IGNORED_LABEL] == word_labels


def test_label_names_are_outside_then_begin_inside_per_type():
    assert label_names(["WINERY", "REGION", "WINERY"]) == [
        "O",
        "B-REGION",
        "I-REGION",
        "B-WINERY",
        "I-WINERY",
    ]
