"""Builds the wine-title NER data: the wine sample's titles tagged with their winery, vintage,
variety and region, located from the catalog's own columns.

A Wine Enthusiast title reads ``<winery> <vintage> <designation> <variety> (<region>)``, e.g.
``Rainstorm 2013 Pinot Gris (Willamette Valley)``. Each entity is found in the title as whole
words, exactly or else case-insensitively (``metricbert_trainer.ner.tagging.locate_span``):
the ``winery`` column (its first occurrence), the ``region_1`` column, or ``province`` where a
wine has no region_1 (its last occurrence: the parenthesis), the ``variety`` column (its last
occurrence outside those) and the vintage, the first year between 1900 and 2029 among the words.
A title without a year is a non-vintage wine and is kept without a vintage; a title where the
winery, region or variety cannot be located is counted and skipped. Items are split 70/30 into
train and test by a fixed shuffle of their ids (``--seed``): the ``split`` column. Three more
columns split them for the studies of ``docs/multitask_ner.md``, each into train, validation
(10% of the titles, to choose the checkpoint on) and test (30%): ``split_random`` (the same
test titles, the validation titles taken from ``split``'s training ones), ``split_winery`` and
``split_variety`` (whole wineries, or varieties, per split: no test title's winery, or variety,
occurs in training). Every row keeps its description, which training reads (the triplet term)
and evaluation does not.

    python data/wines_ner/build_tags.py     # writes wine-titles-ner.jsonl and prints the counts
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections import Counter
from pathlib import Path

import pandas as pd

from metricbert_trainer.ner.tagging import Span, locate_span, spans_to_tags

HERE = Path(__file__).resolve().parent
CATALOG = HERE.parent / "wines" / "winemag-sample-5811.csv"
OUTPUT = HERE / "wine-titles-ner.jsonl"
TRAIN_SHARE = 0.7
# Carved out of the training share for choosing the checkpoint, so that test titles choose nothing.
VALIDATION_SHARE = 0.1
# Splits besides ``split`` (train/test, the recipe's): train/validation/test each.
SPLIT_COLUMNS = ("split_random", "split_winery", "split_variety")
YEAR = re.compile(r"\b(19\d\d|20[0-2]\d)\b")


def text(value: object) -> str:
    return "" if pd.isna(value) else str(value).strip()


def title_spans(row: pd.Series) -> tuple[list[Span] | None, str]:
    """The entity spans of ``row``'s title, or ``None`` and the reason it was skipped."""
    title = text(row["title"])
    if not title:
        return None, "empty title"
    spans: list[Span] = []
    region = text(row["region_1"]) or text(row["province"])
    for column, value, label, last in (
        ("region", region, "REGION", True),
        ("winery", text(row["winery"]), "WINERY", False),
        ("variety", text(row["variety"]), "VARIETY", True),
    ):
        if not value:
            return None, f"no {column} in the catalog"
        span = locate_span(title, value, label, taken=spans, last=last)
        if span is None:
            return None, f"{column} not in the title"
        spans.append(span)
    for match in YEAR.finditer(title):
        vintage = Span(match.start(), match.end(), "VINTAGE")
        if not any(vintage.overlaps(span) for span in spans):
            spans.append(vintage)
            break
    return spans, ""


def build(catalog: Path, seed: int) -> tuple[list[dict], Counter]:
    frame = pd.read_csv(catalog)
    rows, counts = [], Counter()
    for _, row in frame.iterrows():
        spans, reason = title_spans(row)
        if spans is None:
            counts[f"skipped: {reason}"] += 1
            continue
        description = text(row["description"])
        if not description:
            counts["skipped: empty description"] += 1
            continue
        tokens, tags = spans_to_tags(text(row["title"]), spans)
        counts["tagged"] += 1
        counts["tagged without a vintage"] += not any(span.label == "VINTAGE" for span in spans)
        rows.append(
            {
                "id": str(row["id"]),
                "title": text(row["title"]),
                "description": description,
                "tokens": tokens,
                "tags": tags,
                "spans": [
                    [span.start, span.end, span.label] for span in sorted(spans, key=lambda s: s.start)
                ],
            }
        )
    ids = [row["id"] for row in rows]
    random.Random(seed).shuffle(ids)
    train = set(ids[: round(TRAIN_SHARE * len(ids))])
    validation = set(ids[round((TRAIN_SHARE - VALIDATION_SHARE) * len(ids)) : round(TRAIN_SHARE * len(ids))])
    by_winery = entity_disjoint_split(rows, "WINERY", seed)
    by_variety = entity_disjoint_split(rows, "VARIETY", seed)
    for row in rows:
        row["split"] = "train" if row["id"] in train else "test"
        row["split_random"] = "validation" if row["id"] in validation else row["split"]
        row["split_winery"] = by_winery[row["id"]]
        row["split_variety"] = by_variety[row["id"]]
        for column in ("split", *SPLIT_COLUMNS):
            counts[f"{column}: {row[column]}"] += 1
    return rows, counts


def entity_text(row: dict, label: str) -> str:
    """The title's text of the row's ``label`` entity, case and spacing folded."""
    start, end, _ = next(span for span in row["spans"] if span[2] == label)
    return " ".join(row["title"][start:end].lower().split())


def entity_disjoint_split(rows: list[dict], label: str, seed: int) -> dict[str, str]:
    """Item id -> train, validation or test, with every ``label`` entity (a winery, a variety) in one
    split only: the entities are shuffled by ``seed`` and assigned whole, to test until it holds
    the held-out share of the titles, then to validation, then to train. A test title's entity has
    then never been seen in training, which is what a tagger meets on a new catalog."""
    groups: dict[str, list[str]] = {}
    for row in rows:
        groups.setdefault(entity_text(row, label), []).append(row["id"])
    names = sorted(groups)
    random.Random(seed).shuffle(names)
    split, assigned = {}, 0
    for name in names:
        if assigned < (1 - TRAIN_SHARE) * len(rows):
            chosen = "test"
        elif assigned < (1 - TRAIN_SHARE + VALIDATION_SHARE) * len(rows):
            chosen = "validation"
        else:
            chosen = "train"
        split.update(dict.fromkeys(groups[name], chosen))
        assigned += len(groups[name])
    return split


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--catalog", type=Path, default=CATALOG)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--seed", type=int, default=0, help="Seed of the shuffle that splits the items.")
    args = parser.parse_args()
    rows, counts = build(args.catalog, args.seed)
    with open(args.output, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    for name, count in sorted(counts.items()):
        print(f"{name}: {count}")


if __name__ == "__main__":
    main()
