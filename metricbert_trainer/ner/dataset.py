"""Loading a tagged catalog: items with a title, a description and the title's entity tags.

The tags come as a column, in either of two shapes: CoNLL-style, a list of tokens and a list of
BIO tags of the same length (``tokens_column``, ``tags_column``), or character spans over the
title (``spans_column``: ``[start, end, type]`` triples or ``{"start", "end", "label"}``
objects), which become word tags (``tagging.spans_to_tags``). A ``split_column`` separates the
training items from the held-out ones. Any mistake names the file, the row and what to change.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import datasets
import pandas as pd

from metricbert_trainer.data.catalog import CatalogError, require_columns
from metricbert_trainer.ner.tagging import (
    Span,
    TaggingError,
    check_tags,
    label_names,
    spans_to_tags,
    split_tag,
)

logger = logging.getLogger(__name__)

# The columns of a loaded tagged catalog (``TaggedCatalog.train`` and ``.test``).
COLUMNS = ("id", "title", "description", "tokens", "tags")


@dataclass(frozen=True)
class TaggedCatalog:
    """Tagged titles split into ``train`` and ``test`` datasets (columns ``COLUMNS``), and the
    model's labels (``O``, then ``B-``/``I-`` per entity type, ``tagging.label_names``).
    ``validation`` holds the titles to choose a checkpoint on, when the split column names any."""

    train: datasets.Dataset
    test: datasets.Dataset
    labels: list[str]
    source: str
    validation: datasets.Dataset | None = None


def load_tagged_catalog(
    path: str | Path,
    *,
    id_column: str | None = "id",
    title_column: str = "title",
    description_column: str = "description",
    tokens_column: str = "tokens",
    tags_column: str = "tags",
    spans_column: str | None = None,
    split_column: str = "split",
    train_split: str = "train",
    test_split: str = "test",
    validation_split: str = "validation",
    labels: Sequence[str] | None = None,
) -> TaggedCatalog:
    """Reads a JSONL, JSON or Parquet file of tagged items.

    With ``spans_column`` the tags are made from spans over ``title_column``; otherwise
    ``tokens_column`` and ``tags_column`` hold them (the title, when its column is absent, is the
    tokens joined by spaces). ``labels`` fixes the label list (a trained model's, to evaluate it);
    by default it is made from the entity types found.
    """
    frame, name = _read_tagged_file(path)
    tag_columns = [spans_column] if spans_column else [tokens_column, tags_column]
    require_columns(
        frame, name, [description_column, split_column, *tag_columns], "the tagged catalog's columns"
    )
    if spans_column or tokens_column not in frame:
        require_columns(frame, name, [title_column], "title_column")
    rows = []
    for position, row in enumerate(frame.to_dict("records")):
        where = f"{name}, row {position + 1}"
        if spans_column:
            title = str(row.get(title_column))
            tokens, tags = _tags_from_spans(title, row[spans_column], where)
        else:
            tokens, tags = (
                [str(token) for token in row[tokens_column]],
                [str(tag) for tag in row[tags_column]],
            )
            check_tags(tokens, tags, where)
            title = row.get(title_column)
            title = title if isinstance(title, str) else " ".join(tokens)
        rows.append(
            {
                "id": str(row[id_column]) if id_column else str(position),
                "title": str(title),
                "description": str(row[description_column]),
                "tokens": tokens,
                "tags": tags,
                "split": str(row[split_column]),
            }
        )
    table = pd.DataFrame(rows, columns=[*COLUMNS, "split"])
    entity_types = {split_tag(tag)[1] for tags in table["tags"] for tag in tags} - {""}
    if labels is None:
        labels = label_names(entity_types)
    unknown = sorted(entity_types - {split_tag(label)[1] for label in labels})
    if unknown:
        raise TaggingError(f"{name}: entity types {unknown} are not among the model's labels {list(labels)}.")
    splits = {
        split: datasets.Dataset.from_pandas(
            table[table["split"] == split].drop(columns="split").reset_index(drop=True), preserve_index=False
        )
        for split in (train_split, test_split, validation_split)
    }
    if not len(splits[test_split]):
        raise CatalogError(
            f"{name}: no item has {split_column} == {test_split!r}; the evaluation needs them."
        )
    validation = splits[validation_split] if len(splits[validation_split]) else None
    logger.info(
        "Loaded %d training, %d validation and %d held-out tagged titles (%s) from %s.",
        len(splits[train_split]),
        len(validation or ()),
        len(splits[test_split]),
        ", ".join(sorted(entity_types)),
        name,
    )
    return TaggedCatalog(splits[train_split], splits[test_split], list(labels), name, validation)


def _read_tagged_file(path: str | Path) -> tuple[pd.DataFrame, str]:
    """The file's table and its name for messages; tags are lists, which CSV cannot hold."""
    path = Path(path)
    if path.suffix not in (".jsonl", ".json", ".parquet"):
        raise CatalogError(f"{path}: a tagged catalog is a .jsonl, .json or .parquet file (lists need them).")
    if not path.exists():
        raise CatalogError(f"{path}: no such file.")
    if path.suffix == ".parquet":
        return pd.read_parquet(path), str(path)
    return pd.read_json(path, lines=path.suffix == ".jsonl"), str(path)


def _tags_from_spans(title: str, values: Sequence[object], where: str) -> tuple[list[str], list[str]]:
    """A title's words and BIO tags from its character spans, a bad span named by ``where``."""
    spans = [_span(value, where) for value in values]
    try:
        return spans_to_tags(title, spans)
    except TaggingError as error:
        raise TaggingError(f"{where}: {error}") from None


def _span(value: object, where: str) -> Span:
    """A ``Span`` from ``[start, end, type]`` or ``{"start", "end", "label"}``."""
    try:
        if isinstance(value, dict):
            return Span(int(value["start"]), int(value["end"]), str(value["label"]))
        start, end, label = value
        return Span(int(start), int(end), str(label))
    except (KeyError, TypeError, ValueError):
        raise TaggingError(
            f"{where}: {value!r} is not a span; give [start, end, type] or {{'start', 'end', 'label'}}."
        ) from None
