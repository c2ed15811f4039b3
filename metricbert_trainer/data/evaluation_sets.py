"""Building held-out evaluation sets: test seeds disjoint from the dev seeds, and masked views.

A benchmark's annotated seeds choose the defaults (the *dev* seeds); numbers that are reported
must come from seeds no choice has seen (the *test* seeds), drawn by the same labelling rule.
``draw_annotations`` draws them from a similarity map the data folder's build script computes
from its label columns, leaving out the seeds given.

When the labels come from metadata whose strings the texts also spell out (a wine's variety in
its title), a scorer can match the label words instead of learning similarity. ``mask_terms``
removes such strings from every text, so that the same catalog can be scored with them gone.
These run in the data folders' build scripts; no scorer or model reads the label columns.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import pandas as pd

ANNOTATION_COLUMNS = ("seed_id", "seed_title", "recommended_id", "recommended_title")


def draw_annotations(
    similar: Mapping[str, Sequence[str]],
    titles: Mapping[str, str],
    *,
    seeds: int,
    per_seed: int,
    rng_seed: int,
    exclude: Iterable[str] = (),
) -> pd.DataFrame:
    """``seeds`` random seeds among the items with at least ``per_seed`` similar ones (minus
    ``exclude``), and ``per_seed`` of each seed's similar items drawn at random; the columns of
    ``ANNOTATION_COLUMNS``, one row per pair. The same arguments always draw the same rows."""
    excluded = set(exclude)
    eligible = sorted(
        item for item, others in similar.items() if len(others) >= per_seed and item not in excluded
    )
    if len(eligible) < seeds:
        raise SystemExit(
            f"Only {len(eligible)} items have {per_seed} similar ones (outside the {len(excluded)} excluded); "
            f"{seeds} seeds are needed."
        )
    rng = random.Random(rng_seed)
    rows = [
        (seed, titles[seed], item, titles[item])
        for seed in rng.sample(eligible, seeds)
        for item in rng.sample(list(similar[seed]), per_seed)
    ]
    return pd.DataFrame(rows, columns=list(ANNOTATION_COLUMNS))


def labels_similar(
    labels_a: frozenset[str], labels_b: frozenset[str], min_jaccard: float, min_shared: int
) -> bool:
    """The label rule of the Debian and PyPI benchmarks: two items are similar when they share at
    least ``min_shared`` labels and the Jaccard similarity of their label sets is at least
    ``min_jaccard`` (one shared label among many would pair items by a side topic)."""
    shared, union = len(labels_a & labels_b), len(labels_a | labels_b)
    return union > 0 and shared >= min_shared and shared / union >= min_jaccard


def similar_by_labels(
    labels: Mapping[str, frozenset[str]],
    min_jaccard: float,
    min_shared: int,
    group: Mapping[str, str] | None = None,
) -> dict[str, list[str]]:
    """Item -> the items similar to it under ``labels_similar``, sorted; with ``group``, only items
    of the same group are compared (Debian's rule also asks for the same archive section)."""
    members: dict[str, list[str]] = {}
    for item in labels:
        members.setdefault(group[item] if group else "", []).append(item)
    similar: dict[str, list[str]] = {item: [] for item in labels}
    for items in members.values():
        for position, a in enumerate(items):
            for b in items[position + 1 :]:
                if labels_similar(labels[a], labels[b], min_jaccard, min_shared):
                    similar[a].append(b)
                    similar[b].append(a)
    return {item: sorted(others) for item, others in similar.items()}


def word_statistics(texts: Iterable[str]) -> dict[str, float]:
    """The length of ``texts`` in whitespace-separated words (min, median, mean, p90, p95, max):
    what a benchmark's README and manifest say of its descriptions."""
    words = sorted(len(text.split()) for text in texts)
    cuts = statistics.quantiles(words, n=20, method="inclusive")  # cut points at 5%, 10%, ... 95%
    return {
        "min": words[0],
        "median": statistics.median(words),
        "mean": round(statistics.fmean(words), 1),
        "p90": cuts[17],
        "p95": cuts[18],
        "max": words[-1],
    }


def term_pattern(terms: Iterable[str], *, case_sensitive: Iterable[str] = ()) -> re.Pattern[str]:
    """One regular expression matching any of ``terms`` as whole words, longest first (so that
    "Napa Valley" goes before "Napa"), ignoring case except for the ``case_sensitive`` terms
    (a country written "US" must not take the pronoun "us" with it). Inside a term, a space or a
    hyphen also matches the other and runs of them."""
    sensitive = {term for term in case_sensitive if term}
    alternatives = []
    for term in sorted({term.strip() for term in terms if term and term.strip()}, key=lambda t: (-len(t), t)):
        body = r"[\s-]+".join(re.escape(part) for part in re.split(r"[\s-]+", term))
        alternatives.append(body if term in sensitive else f"(?i:{body})")
    if not alternatives:
        raise ValueError("No terms to mask.")
    return re.compile(r"(?<!\w)(?:" + "|".join(alternatives) + r")(?!\w)")


EMPTY_BRACKETS = re.compile(r"\(\s*[,;/-]?\s*\)")
SPACES = re.compile(r"\s+")


def mask_terms(text: str, pattern: re.Pattern[str], placeholder: str = "") -> tuple[str, int]:
    """``text`` with every match of ``pattern`` replaced by ``placeholder``, brackets left empty
    removed and whitespace collapsed; and how many matches were removed."""
    masked, count = pattern.subn(placeholder, text)
    if count:
        masked = SPACES.sub(" ", EMPTY_BRACKETS.sub("", masked)).strip()
    return masked, count


def mask_catalog(
    catalog: pd.DataFrame, pattern: re.Pattern[str], text_columns: Sequence[str]
) -> tuple[pd.DataFrame, dict[str, int]]:
    """The ``id`` and text columns of ``catalog`` with ``pattern`` masked from every text, and per
    column how many strings were removed from how many texts. A text that masking would empty
    is an error: the catalog loader would drop its item, and the view would rank other items."""
    masked = catalog[["id", *text_columns]].copy()
    counts = {}
    for column in text_columns:
        results = [mask_terms(text, pattern) for text in catalog[column]]
        masked[column] = [text for text, _ in results]
        emptied = int(((masked[column] == "") & (catalog[column].str.strip() != "")).sum())
        if emptied:
            raise SystemExit(f"Masking emptied {emptied} {column}s; the masked catalog would lose items.")
        counts[f"{column}_strings_removed"] = sum(count for _, count in results)
        counts[f"{column}s_changed"] = sum(count > 0 for _, count in results)
    return masked, counts


def write_evaluation_sets(
    output_dir: Path,
    test: tuple[str, pd.DataFrame],
    masked: tuple[str, pd.DataFrame],
    similar: Mapping[str, Sequence[str]],
    dev_seeds: set[str],
) -> dict[str, int]:
    """Writes the (file name, table) of the test annotations and of the masked catalog into
    ``output_dir`` as plain CSV, and returns the counts of the draw."""
    output_dir.mkdir(parents=True, exist_ok=True)
    for name, table in (test, masked):
        table.to_csv(output_dir / name, index=False, lineterminator="\n")
    per_seed = int(test[1].groupby("seed_id").size().iloc[0])
    return {
        "eligible_seeds": sum(len(others) >= per_seed for others in similar.values()),
        "dev_seeds": len(dev_seeds),
        "test_seeds": int(test[1].seed_id.nunique()),
        "test_pairs": len(test[1]),
    }


def build_main(
    build: Callable[[Path, int], dict], description: str, default_dir: Path, argv: list[str] | None = None
) -> None:
    """The command line of the data folders' ``build_evaluation_sets.py``: ``build(output_dir,
    rng_seed)`` writes the files and returns the counts, printed as JSON."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--output-dir", type=Path, default=default_dir)
    parser.add_argument(
        "--rng-seed", type=int, default=1, help="draws the test seeds and their similar items"
    )
    options = parser.parse_args(argv)
    print(json.dumps(build(options.output_dir, options.rng_seed), indent=2))
