"""Builds the Debian packages benchmark: a catalog of package descriptions and debtags-derived
similarity labels, from the archive metadata of Debian bookworm main (amd64).

A second domain next to the wines: an item is a binary package, its title ``name: synopsis`` (as
``apt search`` prints it) and its description the long description a maintainer wrote. Two
packages count as similar when they share their ``Section`` and enough informative debtags;
those two fields are kept in the catalog for provenance only, since no model may read what the
labels were made from. Everything is deterministic given the apt lists and ``--seed``, and
``manifest.json`` records the input checksums so that a rebuild can be compared.

    python data/debian/build_benchmark.py                       # downloads the lists (apt-get)
    python data/debian/build_benchmark.py --lists-dir /tmp/aptlists
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import statistics
import subprocess
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from metricbert_trainer.data.evaluation_sets import draw_annotations, similar_by_labels, word_statistics

HERE = Path(__file__).resolve().parent
MIRROR = "http://deb.debian.org/debian"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
# apt names list files after the mirror and path; the globs ignore the mirror, and the
# "bookworm_" keeps bookworm-updates and bookworm-security out.
PACKAGES_GLOB = "*_dists_bookworm_main_binary-amd64_Packages*"
TRANSLATION_GLOB = "*_dists_bookworm_main_i18n_Translation-en*"
RELEASE_GLOB = "*_dists_bookworm_InRelease"

CATALOG_SIZE = 4000
MIN_WORDS = 40
SUFFIXES_DROPPED = ("-dbg", "-dbgsym", "-doc", "-data", "-common", "-dev")
# Sections where a "lib*" name means a library (C, or a language's modules): their descriptions
# are mostly "this package contains the shared library / bindings of X". lib* packages elsewhere
# (libreoffice, libapache2-mod-*, tools such as libcdio-utils) are applications and stay.
LIBRARY_SECTIONS = frozenset(
    {"libs", "libdevel", "oldlibs", "perl", "java", "cli-mono", "ocaml", "haskell", "javascript", "php"}
)
# Facets that say how a package is built or packaged, not what it is for.
GENERIC_FACETS = frozenset(
    {"role", "interface", "implemented-in", "scope", "special", "made-of", "uitoolkit"}
)
GENERIC_TAGS = frozenset({"suite::debian"})
MAX_TAG_SHARE = 0.15
MIN_JACCARD = 0.5
MIN_SHARED_TAGS = 2
SEEDS = 100
ITEMS_PER_SEED = 10


@dataclass(frozen=True)
class Package:
    """A binary package as the benchmark sees it; ``section`` and ``tags`` are for labels only."""

    name: str
    source: str
    synopsis: str
    description: str
    section: str
    tags: tuple[str, ...]

    @property
    def title(self) -> str:
        return f"{self.name}: {self.synopsis}"

    @property
    def words(self) -> int:
        return len(self.description.split())


# --- reading the apt lists -------------------------------------------------------------------


def fetch_apt_lists(lists_dir: Path) -> None:
    """Downloads bookworm main's Packages and Translation-en into ``lists_dir`` with apt-get,
    from a sources file of its own so that the host's sources (other suites, mirrors) do not count."""
    (lists_dir / "partial").mkdir(parents=True, exist_ok=True)
    sources = lists_dir / "bookworm.sources"
    sources.write_text(
        f"Types: deb\nURIs: {MIRROR}\nSuites: bookworm\nComponents: main\nSigned-By: {KEYRING}\n",
        encoding="utf-8",
    )
    options = {
        "Dir::Etc::SourceList": str(sources),
        "Dir::Etc::SourceParts": str(lists_dir / "partial"),
        "Dir::State::Lists": str(lists_dir),
        "Dir::Cache::pkgcache": "",
        "Dir::Cache::srcpkgcache": "",
        "APT::Architecture": "amd64",
        "APT::Architectures": "amd64",
        "Acquire::Languages": "en",
    }
    command = ["apt-get", "update"] + [f"-o{key}={value}" for key, value in options.items()]
    subprocess.run(command, check=True)


def find_list(lists_dir: Path, pattern: str) -> Path:
    """The one file of ``lists_dir`` matching ``pattern``; anything else would build from the wrong suite."""
    matches = sorted(lists_dir.glob(pattern))
    if len(matches) != 1:
        raise SystemExit(
            f"{lists_dir}: expected one file matching {pattern!r}, found {[m.name for m in matches]}; "
            "pass the folder apt-get update wrote (Dir::State::Lists), or leave --lists-dir out."
        )
    return matches[0]


def read_list(path: Path) -> str:
    """The decompressed text of an apt list file (lz4, gz, xz or plain, as apt stored it)."""
    completed = subprocess.run(
        ["/usr/lib/apt/apt-helper", "cat-file", str(path)], check=True, capture_output=True
    )
    return completed.stdout.decode("utf-8")


def release_date(in_release: str) -> str:
    """The ``Date:`` of an InRelease file: the archive state the lists describe."""
    match = re.search(r"^Date: (.+)$", in_release, flags=re.MULTILINE)
    if match is None:
        raise SystemExit("The InRelease file has no Date: field; is it a Debian release file?")
    return match.group(1).strip()


def parse_stanzas(text: str) -> Iterator[dict[str, str]]:
    """Deb822 stanzas as field -> value; continuation lines are kept verbatim after a newline."""
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        field = None
        for line in block.split("\n"):
            if line.startswith((" ", "\t")) and field is not None:
                fields[field] += "\n" + line
            elif line.strip():
                field, _, value = line.partition(":")
                fields[field] = value.strip()
        if fields:
            yield fields


# --- cleaning -------------------------------------------------------------------------------


def clean_long_description(description_en: str) -> str:
    """The long description of a ``Description-en`` value (its lines after the synopsis) as one
    line of text: each continuation line loses its leading space, " ." lines end a paragraph, and
    paragraphs are joined with a single space, as are the lines within one; whitespace runs
    (verbatim indentation, tabs, stray carriage returns) become one space, so each item is one
    CSV line like the wines."""
    paragraphs: list[list[str]] = [[]]
    for line in description_en.split("\n")[1:]:
        line = line[1:]
        if line.strip() == ".":
            paragraphs.append([])
        else:
            paragraphs[-1].append(line)
    texts = (" ".join(" ".join(lines).split()) for lines in paragraphs)
    return " ".join(text for text in texts if text)


def parse_tags(tag_field: str) -> tuple[str, ...]:
    """The debtags of a ``Tag`` field (comma-separated, wrapped over lines), sorted."""
    return tuple(sorted({tag.strip() for tag in tag_field.split(",") if tag.strip()}))


def source_name(stanza: dict[str, str]) -> str:
    """The source package: ``Source`` without its optional "(version)", else the package itself."""
    return stanza.get("Source", stanza["Package"]).split("(")[0].strip()


def join_packages(packages_text: str, translation_text: str) -> list[Package]:
    """Packages with a Tag field, joined to their English long description by (Package,
    Description-md5); the first stanza of a package name wins (a few names have two versions)."""
    long_descriptions = {
        (stanza["Package"], stanza["Description-md5"]): clean_long_description(stanza["Description-en"])
        for stanza in parse_stanzas(translation_text)
    }
    packages: dict[str, Package] = {}
    for stanza in parse_stanzas(packages_text):
        name = stanza["Package"]
        if "Tag" not in stanza or name in packages:
            continue
        packages[name] = Package(
            name=name,
            source=source_name(stanza),
            synopsis=" ".join(stanza.get("Description", "").split()),
            description=long_descriptions.get((name, stanza.get("Description-md5", "")), ""),
            section=stanza.get("Section", ""),
            tags=parse_tags(stanza["Tag"]),
        )
    return sorted(packages.values(), key=lambda package: package.name)


# --- filtering ------------------------------------------------------------------------------


def is_transitional(package: Package) -> bool:
    """Transitional and dummy packages describe a rename, not software."""
    text = f"{package.synopsis} {package.description}".lower()
    return "transitional" in text or "dummy package" in text


def is_library(package: Package) -> bool:
    """Library packages: their text is mostly "the shared library / development files of X"."""
    return package.name.startswith("lib") and package.section in LIBRARY_SECTIONS


def name_filters() -> list[tuple[str, Callable[[Package], bool]]]:
    """One filter per dropped name suffix, so that the README can give each its count."""
    return [(f"name ends with {suffix}", _ends_with(suffix)) for suffix in SUFFIXES_DROPPED]


def _ends_with(suffix: str) -> Callable[[Package], bool]:
    return lambda package: package.name.endswith(suffix)


def item_filters() -> list[tuple[str, Callable[[Package], bool]]]:
    """The filters, in the order they run; each drops the packages it returns True for."""
    return [
        ("no long description", lambda package: not package.description),
        ("transitional or dummy package", is_transitional),
        *name_filters(),
        (f"lib* in a library section ({', '.join(sorted(LIBRARY_SECTIONS))})", is_library),
        (f"long description under {MIN_WORDS} words", lambda package: package.words < MIN_WORDS),
    ]


def apply_filters(
    packages: list[Package], filters: Iterable[tuple[str, Callable[[Package], bool]]]
) -> tuple[list[Package], dict[str, int]]:
    """The packages no filter drops, and how many each filter dropped (in order)."""
    removed = {}
    for name, drop in filters:
        kept = [package for package in packages if not drop(package)]
        removed[name] = len(packages) - len(kept)
        packages = kept
    return packages, removed


def one_per_source(packages: list[Package]) -> list[Package]:
    """One binary per source package, so siblings with near-identical texts do not make the task
    trivial: the one named like the source, else the longest description (then the first name)."""
    by_source: dict[str, list[Package]] = defaultdict(list)
    for package in packages:
        by_source[package.source].append(package)
    chosen = [
        min(siblings, key=lambda p: (p.name != source, -p.words, p.name))
        for source, siblings in by_source.items()
    ]
    return sorted(chosen, key=lambda package: package.name)


def drop_duplicate_descriptions(packages: list[Package]) -> list[Package]:
    """The first package (by name) of each long description; a copy would be a free match."""
    seen: set[str] = set()
    kept = []
    for package in packages:
        if package.description not in seen:
            seen.add(package.description)
            kept.append(package)
    return kept


def select_items(packages: list[Package], size: int) -> tuple[list[Package], dict[str, int]]:
    """The catalog: the filters, one binary per source, one copy of each text, the ``size``
    longest; and how many packages each step removed, in order, for the README."""
    kept, removed = apply_filters(packages, item_filters())
    per_source = one_per_source(kept)
    removed["not the chosen binary of its source package"] = len(kept) - len(per_source)
    unique = drop_duplicate_descriptions(per_source)
    removed["duplicate long description"] = len(per_source) - len(unique)
    items = longest(unique, size)
    removed[f"not among the {size} longest descriptions"] = len(unique) - len(items)
    return items, removed


def longest(packages: list[Package], size: int) -> list[Package]:
    """The ``size`` packages with the longest descriptions (ties by name), sorted by name: the
    benchmark this stands in for has descriptions of 200-300 tokens, most packages far fewer."""
    ranked = sorted(packages, key=lambda package: (-package.words, package.name))[:size]
    return sorted(ranked, key=lambda package: package.name)


# --- labels ---------------------------------------------------------------------------------


def candidate_tags(package: Package) -> frozenset[str]:
    """The package's tags minus generic facets, ``suite::debian`` and placeholders ("::TODO")."""
    return frozenset(
        tag
        for tag in package.tags
        if tag.split("::")[0] not in GENERIC_FACETS and tag not in GENERIC_TAGS and not tag.endswith("::TODO")
    )


def informative_tags(
    packages: list[Package], max_share: float
) -> tuple[dict[str, frozenset[str]], frozenset[str]]:
    """Each package's candidate tags minus those carried by more than ``max_share`` of the
    packages, which would make most pairs look alike; and the tags so removed."""
    candidates = {package.name: candidate_tags(package) for package in packages}
    counts = Counter(tag for tags in candidates.values() for tag in tags)
    common = frozenset(tag for tag, count in counts.items() if count > max_share * len(packages))
    return {name: tags - common for name, tags in candidates.items()}, common


def similar_items(
    packages: list[Package], tags: dict[str, frozenset[str]], min_jaccard: float, min_shared: int
) -> dict[str, list[str]]:
    """Package name -> names of the packages similar to it (same Section and ``labels_similar``)."""
    sections = {package.name: package.section for package in packages}
    return similar_by_labels(tags, min_jaccard, min_shared, group=sections)


# --- reporting and writing ------------------------------------------------------------------


def label_statistics(
    packages: list[Package],
    similar: dict[str, list[str]],
    tags: dict[str, frozenset[str]],
    per_seed: int,
    annotations: pd.DataFrame,
) -> dict[str, object]:
    """How many packages qualify as seeds, their candidate counts, and the tags the pairs share."""
    counts = sorted(len(others) for others in similar.values() if len(others) >= per_seed)
    sections = {package.name: package.section for package in packages}
    shared = Counter(
        tag
        for seed, item in zip(annotations["seed_id"], annotations["recommended_id"], strict=True)
        for tag in tags[seed] & tags[item]
    )
    seed_sections = Counter(sections[seed] for seed in annotations["seed_id"].unique())
    return {
        "eligible_seeds": len(counts),
        "candidates_per_eligible_seed_median": statistics.median(counts),
        "candidates_per_drawn_seed_median": statistics.median(
            len(similar[seed]) for seed in annotations["seed_id"].unique()
        ),
        "seeds": annotations["seed_id"].nunique(),
        "pairs": len(annotations),
        "top_shared_tags": by_count(shared)[:15],
        "seed_sections": by_count(seed_sections),
    }


def by_count(counts: Counter) -> list[tuple[str, int]]:
    """``counts``' entries, most frequent first and ties by name. Why not ``most_common``: it
    breaks ties in the order the entries were first counted, and the tags come from sets, whose
    order changes with every process's string hashing, so the manifest changed between builds."""
    return sorted(counts.items(), key=lambda entry: (-entry[1], entry[0]))


def catalog_frame(packages: list[Package]) -> pd.DataFrame:
    """The catalog table: id, title, description, then the label-only columns section and tags."""
    return pd.DataFrame(
        {
            "id": [package.name for package in packages],
            "title": [package.title for package in packages],
            "description": [package.description for package in packages],
            "section": [package.section for package in packages],
            "tags": [", ".join(package.tags) for package in packages],
        }
    )


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def build(lists_dir: Path, output_dir: Path, options: argparse.Namespace) -> dict[str, object]:
    """Builds and writes the catalog, the annotations and manifest.json; returns the manifest."""
    packages_path = find_list(lists_dir, PACKAGES_GLOB)
    translation_path = find_list(lists_dir, TRANSLATION_GLOB)
    release_path = find_list(lists_dir, RELEASE_GLOB)
    packages_text, translation_text = read_list(packages_path), read_list(translation_path)

    packages = join_packages(packages_text, translation_text)
    items, removed = select_items(packages, options.size)

    tags, common_tags = informative_tags(items, options.max_tag_share)
    similar = similar_items(items, tags, options.min_jaccard, options.min_shared_tags)
    titles = {package.name: package.title for package in items}
    annotations = draw_annotations(
        similar, titles, seeds=SEEDS, per_seed=ITEMS_PER_SEED, rng_seed=options.seed
    )

    output_dir.mkdir(parents=True, exist_ok=True)
    catalog_path = output_dir / f"debian-packages-{len(items)}.csv"
    annotations_path = output_dir / "debtags-annotations-100-seeds.csv"
    catalog_frame(items).to_csv(catalog_path, index=False, lineterminator="\n")
    annotations.to_csv(annotations_path, index=False, lineterminator="\n")

    manifest = {
        "archive": "Debian bookworm main, binary-amd64",
        "release_date": release_date(release_path.read_text(encoding="utf-8")),
        "inputs": {
            packages_path.name: {"decompressed_sha256": sha256(packages_text.encode("utf-8"))},
            translation_path.name: {"decompressed_sha256": sha256(translation_text.encode("utf-8"))},
        },
        "settings": {
            "seed": options.seed,
            "size": options.size,
            "min_words": MIN_WORDS,
            "max_tag_share": options.max_tag_share,
            "min_jaccard": options.min_jaccard,
            "min_shared_tags": options.min_shared_tags,
            "generic_facets": sorted(GENERIC_FACETS),
        },
        "counts": {"tagged_packages": len(packages), "removed": removed, "items": len(items)},
        "description_words": word_statistics(item.description for item in items),
        "labels": label_statistics(items, similar, tags, ITEMS_PER_SEED, annotations),
        "tags_over_max_share": sorted(common_tags),
        "outputs": {path.name: sha256(path.read_bytes()) for path in (catalog_path, annotations_path)},
    }
    (output_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--lists-dir",
        type=Path,
        help="a folder apt-get update wrote (Dir::State::Lists) for bookworm main; by default the "
        "lists are downloaded into a temporary folder",
    )
    parser.add_argument("--output-dir", type=Path, default=HERE)
    parser.add_argument("--seed", type=int, default=0, help="draws the seeds and their similar items")
    parser.add_argument(
        "--size", type=int, default=CATALOG_SIZE, help="items kept, longest descriptions first"
    )
    parser.add_argument("--max-tag-share", type=float, default=MAX_TAG_SHARE)
    parser.add_argument("--min-jaccard", type=float, default=MIN_JACCARD)
    parser.add_argument("--min-shared-tags", type=int, default=MIN_SHARED_TAGS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    options = parse_args(argv)
    if options.lists_dir is not None:
        manifest = build(options.lists_dir, options.output_dir, options)
    else:
        with tempfile.TemporaryDirectory() as folder:
            fetch_apt_lists(Path(folder))
            manifest = build(Path(folder), options.output_dir, options)
    print(json.dumps({key: manifest[key] for key in ("counts", "description_words", "labels")}, indent=2))


if __name__ == "__main__":
    main()
