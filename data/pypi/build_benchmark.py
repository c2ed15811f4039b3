"""Builds the PyPI projects benchmark: a catalog of Python projects (title: the name and summary,
description: the README's prose) and similarity labels from their trove classifiers, with dev and
test seeds and a masked-label view.

A third domain beside the wines and the Debian packages, built so that no default of this project
was chosen on it: two projects count as similar when they share enough informative ``Topic ::``
and ``Framework ::`` classifiers, which their authors chose; the classifiers are kept in the
catalog for provenance only, since no model may read what the labels were made from. The input
is the JSON Lines file ``fetch_projects.py`` writes (a random sample of the index, each project's
latest release); everything after it is deterministic, and ``manifest.json`` records the input's
checksum and every count, so that a rebuild can be compared.

    python data/pypi/fetch_projects.py --output /tmp/pypi-projects.jsonl
    python data/pypi/build_benchmark.py --projects /tmp/pypi-projects.jsonl
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from fetch_projects import index_name
from readme_text import readme_text

from metricbert_trainer.data.evaluation_sets import (
    draw_annotations,
    mask_catalog,
    similar_by_labels,
    term_pattern,
    word_statistics,
)

HERE = Path(__file__).resolve().parent
CATALOG_SIZE = 4000
MIN_WORDS = 40
MAX_WORDS = 300
OPENING_WORDS = 25
MIN_ASCII_LETTER_SHARE = 0.95
LABEL_PREFIXES = ("Topic :: ", "Framework :: ")
MAX_LABEL_SHARE = 0.15
MIN_JACCARD = 0.5
MIN_SHARED_LABELS = 2
DEV_SEEDS = 100
TEST_SEEDS = 300
ITEMS_PER_SEED = 10
TEXT_COLUMNS = ("title", "description")
CATALOG_NAME = f"pypi-projects-{CATALOG_SIZE}.csv"
DEV_NAME = f"classifier-annotations-{DEV_SEEDS}-seeds.csv"
TEST_NAME = f"classifier-annotations-test-{TEST_SEEDS}-seeds.csv"
MASKED_NAME = f"pypi-projects-{CATALOG_SIZE}-masked.csv"


@dataclass(frozen=True)
class Project:
    """A PyPI project as the benchmark sees it: ``name`` is the index's normalised name (the
    catalog's id), ``display_name`` the one its authors wrote; ``classifiers`` are for labels only."""

    name: str
    display_name: str
    version: str
    summary: str
    description: str
    classifiers: tuple[str, ...]

    @property
    def title(self) -> str:
        return f"{self.display_name}: {self.summary}"

    @property
    def words(self) -> int:
        return len(self.description.split())


def read_projects(path: Path) -> tuple[list[dict], int]:
    """The fetched records, one per project name (the first line of a name), and how many of
    them the API did not know."""
    records: dict[str, dict] = {}
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                record = json.loads(line)
                records.setdefault(index_name(record), record)
    known = [records[name] for name in sorted(records) if not records[name].get("missing")]
    return known, len(records) - len(known)


def project_of(record: dict) -> Project:
    return Project(
        name=record["index_name"],
        display_name=record.get("name") or record["index_name"],
        version=record.get("version") or "",
        summary=" ".join((record.get("summary") or "").split()),
        description=readme_text(record.get("description") or "", MAX_WORDS),
        classifiers=tuple(record.get("classifiers") or ()),
    )


def stated_labels(classifiers: tuple[str, ...]) -> frozenset[str]:
    """The ``Topic`` and ``Framework`` classifiers as the authors chose them, without a version at
    their end ("Framework :: Django :: 4.2" says "Framework :: Django")."""
    labels = set()
    for classifier in classifiers:
        if classifier.startswith(LABEL_PREFIXES):
            parts = [part.strip() for part in classifier.split("::")]
            while parts and parts[-1][:1].isdigit():
                parts.pop()
            if len(parts) >= 2:
                labels.add(" :: ".join(parts))
    return frozenset(labels)


def with_parents(labels: frozenset[str]) -> frozenset[str]:
    """Each label and every label above it ("Topic :: A :: B" also says "Topic :: A")."""
    parts = [label.split(" :: ") for label in labels]
    return frozenset(" :: ".join(split[:end]) for split in parts for end in range(2, len(split) + 1))


def ascii_letter_share(text: str) -> float:
    letters = [character for character in text if character.isalpha()]
    return sum(character.isascii() for character in letters) / len(letters) if letters else 0.0


def item_filters() -> list[tuple[str, Callable[[Project], bool]]]:
    """(reason, removes) in the order they apply."""
    return [
        ("no Topic or Framework classifier", lambda project: not stated_labels(project.classifiers)),
        ("no summary", lambda project: not project.summary),
        (f"README prose under {MIN_WORDS} words", lambda project: project.words < MIN_WORDS),
        (
            f"under {MIN_ASCII_LETTER_SHARE:.0%} of the letters ASCII (not English)",
            lambda project: (
                ascii_letter_share(f"{project.summary} {project.description}") < MIN_ASCII_LETTER_SHARE
            ),
        ),
    ]


def drop_shared_openings(projects: list[Project]) -> list[Project]:
    """The first project (by name) of each README opening (its first ``OPENING_WORDS`` words,
    case-folded): a family of projects from one source (plugins of one framework, one vendor's
    SDKs) repeats one README, which would pair them by boilerplate, as Debian's one binary per
    source package avoids."""
    seen, kept = set(), []
    for project in projects:
        opening = " ".join(project.description.casefold().split()[:OPENING_WORDS])
        if opening not in seen:
            seen.add(opening)
            kept.append(project)
    return kept


def select_items(records: list[dict], size: int, seed: int) -> tuple[list[Project], dict[str, int]]:
    """The catalog's projects, sorted by name, and how many each step removed."""
    projects = [project_of(record) for record in records]
    removed = {}
    for reason, removes in item_filters():
        kept = [project for project in projects if not removes(project)]
        removed[reason] = len(projects) - len(kept)
        projects = kept
    unique = drop_shared_openings(projects)
    removed[f"README opening ({OPENING_WORDS} words) shared with a project before it"] = len(projects) - len(
        unique
    )
    drawn = unique if len(unique) <= size else random.Random(seed).sample(unique, size)
    removed[f"not among the {size} drawn"] = len(unique) - len(drawn)
    return sorted(drawn, key=lambda project: project.name), removed


def informative_labels(
    classifiers: dict[str, tuple[str, ...]], max_share: float
) -> tuple[dict[str, frozenset[str]], frozenset[str]]:
    """Each project's stated labels minus those that more than ``max_share`` of the projects say,
    counting the labels their children imply (``Topic :: Software Development`` says little of what
    a library is for, whether written out or implied by ``... :: Libraries``); and the labels so
    removed. As debtags are, labels count as the authors stated them: one classifier and the
    parent it implies are not two shared labels."""
    stated = {name: stated_labels(project_classifiers) for name, project_classifiers in classifiers.items()}
    counts = Counter(label for labels in stated.values() for label in with_parents(labels))
    common = frozenset(label for label, count in counts.items() if count > max_share * len(stated))
    return {name: labels - common for name, labels in stated.items()}, common


def label_strings(labels: dict[str, frozenset[str]]) -> set[str]:
    """Every part of every informative label after its ``Topic``/``Framework`` prefix, split at
    ``::`` and ``/`` ("Topic :: Internet :: WWW/HTTP" gives "Internet", "WWW" and "HTTP")."""
    strings = set()
    for project_labels in labels.values():
        for label in project_labels:
            for part in label.split("::")[1:]:
                strings.update(piece.strip() for piece in part.split("/") if piece.strip())
    return strings


def label_statistics(
    similar: dict[str, list[str]], labels: dict[str, frozenset[str]], annotations: pd.DataFrame
) -> dict[str, object]:
    """How many projects qualify as seeds, the drawn seeds' candidate counts, the labels the pairs share."""
    shared = Counter(
        label
        for seed, item in zip(annotations["seed_id"], annotations["recommended_id"], strict=True)
        for label in labels[seed] & labels[item]
    )
    by_count = sorted(shared.items(), key=lambda entry: (-entry[1], entry[0]))  # ties by name
    return {
        "seeds": annotations["seed_id"].nunique(),
        "pairs": len(annotations),
        "candidates_per_drawn_seed_median": statistics.median(
            len(similar[seed]) for seed in annotations["seed_id"].unique()
        ),
        "top_shared_labels": by_count[:15],
    }


def catalog_frame(projects: list[Project]) -> pd.DataFrame:
    """The catalog, a row per project: id, title, description, then the provenance columns
    version and classifiers (label-only: no model may read them)."""
    rows = [
        (project.name, project.title, project.description, project.version, "; ".join(project.classifiers))
        for project in projects
    ]
    return pd.DataFrame(rows, columns=["id", "title", "description", "version", "classifiers"])


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def catalog_classifiers(catalog: pd.DataFrame) -> dict[str, tuple[str, ...]]:
    """Project -> its classifiers, from the catalog's provenance column."""
    return {
        name: tuple(classifier for classifier in joined.split("; ") if classifier)
        for name, joined in zip(catalog["id"], catalog["classifiers"], strict=True)
    }


def write_labelled_files(catalog: pd.DataFrame, output_dir: Path, seed: int) -> dict[str, object]:
    """The dev and test annotations and the masked-label view, computed from the catalog's own
    ``classifiers`` column (so the shipped catalog rebuilds them without a download), written
    into ``output_dir``; returns what the manifest says of them."""
    labels, common = informative_labels(catalog_classifiers(catalog), MAX_LABEL_SHARE)
    similar = similar_by_labels(labels, MIN_JACCARD, MIN_SHARED_LABELS)
    titles = dict(zip(catalog["id"], catalog["title"], strict=True))
    dev = draw_annotations(similar, titles, seeds=DEV_SEEDS, per_seed=ITEMS_PER_SEED, rng_seed=seed)
    test = draw_annotations(
        similar,
        titles,
        seeds=TEST_SEEDS,
        per_seed=ITEMS_PER_SEED,
        rng_seed=seed + 1,
        exclude=set(dev.seed_id),
    )
    strings = label_strings(labels)
    masked, mask_counts = mask_catalog(catalog, term_pattern(strings), TEXT_COLUMNS)
    for name, table in ((DEV_NAME, dev), (TEST_NAME, test), (MASKED_NAME, masked)):
        table.to_csv(output_dir / name, index=False, lineterminator="\n")
    return {
        "labels": {
            "eligible_seeds": sum(len(others) >= ITEMS_PER_SEED for others in similar.values()),
            "over_max_share": sorted(common),
            "dev": label_statistics(similar, labels, dev),
            "test": label_statistics(similar, labels, test),
        },
        "masked_view": {"label_strings": len(strings), **mask_counts},
    }


def build(projects_path: Path, output_dir: Path, options: argparse.Namespace) -> dict[str, object]:
    """Builds and writes the catalog, its masked view, the dev and test annotations and
    manifest.json; returns the manifest."""
    records, missing = read_projects(projects_path)
    items, removed = select_items(records, options.size, options.seed)
    output_dir.mkdir(parents=True, exist_ok=True)
    catalog_frame(items).to_csv(output_dir / CATALOG_NAME, index=False, lineterminator="\n")
    catalog = pd.read_csv(output_dir / CATALOG_NAME, dtype=str, keep_default_na=False)
    labelled = write_labelled_files(catalog, output_dir, options.seed)
    upload_times = sorted(record["upload_time"] for record in records if record.get("upload_time"))
    manifest = {
        "source": "PyPI JSON API (https://pypi.org/pypi/<project>/json), latest release of each project",
        "input": {
            "file": projects_path.name,
            "sha256": sha256(projects_path.read_bytes()),
            "records": len(records) + missing,
            "latest_upload_time": upload_times[-1] if upload_times else None,
        },
        "settings": {
            "seed": options.seed,
            "size": options.size,
            "min_words": MIN_WORDS,
            "max_words": MAX_WORDS,
            "opening_words": OPENING_WORDS,
            "min_ascii_letter_share": MIN_ASCII_LETTER_SHARE,
            "max_label_share": MAX_LABEL_SHARE,
            "min_jaccard": MIN_JACCARD,
            "min_shared_labels": MIN_SHARED_LABELS,
        },
        "counts": {"missing_from_the_api": missing, "removed": removed, "items": len(items)},
        "description_words": word_statistics(item.description for item in items),
        **labelled,
        "outputs": {
            name: sha256((output_dir / name).read_bytes())
            for name in (CATALOG_NAME, MASKED_NAME, DEV_NAME, TEST_NAME)
        },
    }
    (output_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--projects", type=Path, help="the JSON Lines file of fetch_projects.py")
    source.add_argument(
        "--from-catalog",
        action="store_true",
        help="rebuild only the annotations and the masked view, from this folder's catalog",
    )
    parser.add_argument("--output-dir", type=Path, default=HERE)
    parser.add_argument(
        "--seed", type=int, default=0, help="draws the items and the dev seeds (the test seeds: seed + 1)"
    )
    parser.add_argument("--size", type=int, default=CATALOG_SIZE, help="items drawn among those kept")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    options = parse_args(argv)
    if options.from_catalog:
        options.output_dir.mkdir(parents=True, exist_ok=True)
        catalog = pd.read_csv(HERE / CATALOG_NAME, dtype=str, keep_default_na=False)
        print(json.dumps(write_labelled_files(catalog, options.output_dir, options.seed), indent=2))
        return
    manifest = build(options.projects, options.output_dir, options)
    print(
        json.dumps(
            {key: manifest[key] for key in ("counts", "description_words", "labels", "masked_view")}, indent=2
        )
    )


if __name__ == "__main__":
    main()
