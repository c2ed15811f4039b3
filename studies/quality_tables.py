"""The quality tables of docs/quality.md, reproduced by one command.

A benchmark file (``studies/quality.yaml``) names, for each development benchmark, its
catalog, its masked-label view of that catalog, its annotation files by split (``dev``: the
seeds every choice of default was made on; ``test``: seeds drawn by the same rule that no choice
has seen) and the recipe command that trains its default model. The command

1. trains the default recipe once per training seed, into ``--models-dir`` (a model already
   there is reused, so an interrupted run goes on where it stopped);
2. ranks each catalog view with TF-IDF per field, the zero-shot starting encoder and every
   trained model (Metric_Inf, at the ``max_length`` the recipe chooses from the catalog), each
   encoder also in the hybrid with TF-IDF (``evaluation.hybrid``) and in the hybrid re-ranked by
   shared neighbours (``evaluation.shared_neighbours``), which ``evaluate`` and ``recommend`` rank
   with, on every split;
3. writes one JSON line per (benchmark, view, split, model, training seed) and prints the tables:
   one per split, each model's mean and standard deviation over training seeds, and the trained
   model's gain over its start under each of those rankings.

The TF-IDF rows are deterministic: ``tests/scripts/test_quality_tables.py`` recomputes them and
fails when docs/quality.md states other numbers; it also fails when the prose that reads the tables
(there, and README.md's summary) quotes a "mean ± spread" the tables do not give (``unsupported_figures``).

    python studies/quality_tables.py                  # everything (trains what outputs/quality lacks)
    python studies/quality_tables.py --tfidf-only     # the deterministic rows, in seconds
    python studies/quality_tables.py --report         # the tables of the results file

On a 2-core CPU that trains in fp32 (no AMX) a wine training takes about 10 minutes and a Debian one
about 20; trained models are kept in outputs/quality and reused.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import yaml
from transformers import AutoTokenizer

from metricbert_trainer.base.modeling import load_masked_lm, resolve_model_name
from metricbert_trainer.data.annotations import Annotations, load_annotations
from metricbert_trainer.data.catalog import Catalog, load_catalog
from metricbert_trainer.data.graded_pools import GradedPools, is_pool_file, load_graded_pools
from metricbert_trainer.data.lengths import data_driven_max_length
from metricbert_trainer.evaluation.evaluator import evaluate_distance_rows
from metricbert_trainer.evaluation.hybrid import (
    DEFAULT_TFIDF_MODE,
    DEFAULT_TFIDF_WEIGHT,
    TFIDF_VIEWS,
    with_tfidf,
)
from metricbert_trainer.evaluation.neighbours import METRIC_INF
from metricbert_trainer.evaluation.pool_metrics import POOL_METRICS, pool_rows, pool_scores
from metricbert_trainer.evaluation.scorers import EncoderScorer, Scorer, TfidfScorer, load_encoder
from metricbert_trainer.evaluation.shared_neighbours import (
    DEFAULT_NEIGHBOURS,
    DEFAULT_WEIGHT,
    SharedNeighbourScorer,
)
from metricbert_trainer.publishing.markdown import markdown_table

logger = logging.getLogger(__name__)

METRICS = ("mpr", "mrr", "hr@10", "hr@100", "map", "ndcg@20")
# The metrics of a benchmark judged as graded pools (evaluation.pool_metrics), each pool ranked on its own.
POOLED_METRICS = POOL_METRICS
SPLITS = ("dev", "test")
VIEWS = ("plain", "masked")
TFIDF = "TF-IDF (per field)"
ZERO_SHOT = "MiniLM zero-shot"
TRAINED = "default recipe"
# Each encoder is ranked alone, in the hybrid with TF-IDF (evaluation.hybrid), in the hybrid
# re-ranked by shared neighbours (evaluation.shared_neighbours) at the settings that serve category
# catalogs, and as evaluate and recommend rank by default. The first three keep their settings
# whatever the defaults are, so a row keeps its name and its meaning when a default changes; the
# default's rows are named by its settings.
TABLE_TFIDF_WEIGHT = 0.3
TABLE_NEIGHBOURS = 50
TABLE_NEIGHBOUR_WEIGHT = 0.5
HYBRID = f" + TF-IDF {TABLE_TFIDF_WEIGHT:g}"
RERANKED = f" + shared neighbours {TABLE_NEIGHBOURS}"
# The default's TF-IDF views, named as ``with_tfidf`` names them beside a metric_inf encoder.
DEFAULT_VIEWS = "" if DEFAULT_TFIDF_MODE == METRIC_INF else f" over {TFIDF_VIEWS[DEFAULT_TFIDF_MODE]}"
DEFAULT_RANKING = f" + TF-IDF {DEFAULT_TFIDF_WEIGHT:g}{DEFAULT_VIEWS} + shared neighbours {DEFAULT_NEIGHBOURS} at {DEFAULT_WEIGHT:g}"


def ranked_as(model: str) -> tuple[str, ...]:
    """The result rows' names of ``model``: alone, in the hybrid, re-ranked, ranked by default."""
    return (model, fused(model), reranked(model), f"{model}{DEFAULT_RANKING}")


# A ranking's suffix at any setting, so that rows written under earlier defaults are still
# known as their encoder's (and replaced when it is ranked again).
VIEWS_SUFFIX = "|".join(re.escape(f" over {words}") for words in TFIDF_VIEWS.values())
RANKING_SUFFIX = re.compile(
    rf"( \+ TF-IDF [0-9.]+({VIEWS_SUFFIX})?)?( \+ shared neighbours [0-9]+( at [0-9.]+)?)?$"
)


def encoder_of(name: str) -> str:
    """The encoder a result row's name ranks with (``ranked_as`` undone, whatever the settings)."""
    return RANKING_SUFFIX.sub("", name, count=1)


def ranking_of(name: str) -> str:
    """The ranking a result row's name ranks with, as the suffix ``encoder_of`` takes off ("" alone)."""
    return name[len(encoder_of(name)) :]


def ranking_suffixes(rows: Iterable[dict]) -> list[str]:
    """The rankings of ``rows`` as name suffixes ("" alone, then the hybrids, then the re-ranked,
    each in the order first met): a results file may hold rows ranked under earlier defaults."""
    found = dict.fromkeys(ranking_of(row["model"]) for row in rows)
    return sorted(found, key=lambda suffix: suffix.count(" + "))


def gains(trained: str, suffixes: Sequence[str]) -> tuple[tuple[str, str, str], ...]:
    """A trained model's gain rows over its start under each ranking of ``suffixes``:
    (gain row, trained, start)."""
    return tuple(
        (f"{trained}{suffix} - zero-shot{suffix}", f"{trained}{suffix}", f"{ZERO_SHOT}{suffix}")
        for suffix in suffixes
    )


COMMAND = "python studies/quality_tables.py"


@dataclass(frozen=True)
class Benchmark:
    """One development benchmark: its catalog views, annotation files by split, and training command.

    A benchmark judged by experts as graded pools (``data.graded_pools``) may have no masked view
    (its similarity is not a label a title spells out) and a dev split alone (its test fold held
    out of the project)."""

    name: str
    catalog: str
    masked_catalog: str | None
    annotations: dict[str, str]
    recipe: tuple[str, ...]

    def catalog_path(self, view: str) -> str:
        return self.catalog if view == "plain" else self.masked_catalog

    @property
    def views(self) -> tuple[str, ...]:
        return VIEWS if self.masked_catalog else ("plain",)

    @property
    def pooled(self) -> bool:
        """Whether its judgments are graded pools, ranked pool by pool."""
        return any(is_pool_file(path) for path in self.annotations.values())


@dataclass(frozen=True)
class QualitySpec:
    """The benchmark file: the starting model, the training seeds and the benchmarks."""

    model: str
    train_seeds: tuple[int, ...]
    benchmarks: tuple[Benchmark, ...]
    # Named variants of every benchmark's recipe: the flags each adds to it (the levers studied).
    variants: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def from_yaml(cls, path: str | Path) -> QualitySpec:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        if "base" in data:
            # A study's file names the benchmark file it extends and adds its variants.
            data = {**yaml.safe_load(Path(data.pop("base")).read_text(encoding="utf-8")), **data}
        benchmarks = tuple(
            Benchmark(
                name=name,
                catalog=entry["catalog"],
                masked_catalog=entry.get("masked_catalog"),
                annotations=dict(entry["annotations"]),
                recipe=tuple(str(part) for part in entry["recipe"]),
            )
            for name, entry in data["benchmarks"].items()
        )
        for benchmark in benchmarks:
            if "dev" not in benchmark.annotations or not set(benchmark.annotations) <= set(SPLITS):
                raise ValueError(
                    f"{path}: {benchmark.name} must name annotations for dev, and only for {SPLITS}."
                )
        variants = {
            name: tuple(str(flag) for flag in flags) for name, flags in (data.get("variants") or {}).items()
        }
        clash = set(variants) & {TFIDF, ZERO_SHOT, TRAINED}
        if clash:
            raise ValueError(f"{path}: variant names {sorted(clash)} are taken by the tables' own rows.")
        return cls(data["model"], tuple(data["train_seeds"]), benchmarks, variants)


def model_folder(models_dir: Path, benchmark: Benchmark, seed: int, variant: str = TRAINED) -> Path:
    """Where a trained model is kept: the default recipe's under the benchmark, a variant's in a
    folder of its own beside them."""
    base = models_dir / benchmark.name
    if variant != TRAINED:
        base = base / "variants" / re.sub(r"[^A-Za-z0-9.+-]+", "_", variant).strip("_")
    return base / f"seed-{seed}"


def train_default(
    benchmark: Benchmark, seed: int, folder: Path, threads: int, flags: Sequence[str] = ()
) -> None:
    """Trains the benchmark's default recipe with one seed into ``folder``, unless a model is there.

    The recipe runs as a user launches it; only the seed, the folder, no checkpoints and no
    annotations (ranking is this script's job, on every split) differ from its defaults, and a
    variant's ``flags``, which come last.
    """
    if (folder / "model.safetensors").is_file():
        logger.info("Reusing the %s model of seed %d in %s.", benchmark.name, seed, folder)
        return
    command = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--num_processes", "1", "--num_cpu_threads_per_process", str(threads),
        *benchmark.recipe,
        "--seed", str(seed), "--output_dir", str(folder), "--save_strategy", "no", "--annotations", "",
        *flags,
    ]  # fmt: skip
    logger.info("Training %s, seed %d: %s", benchmark.name, seed, " ".join(command))
    subprocess.run(command, check=True)


def catalog_views(benchmark: Benchmark) -> dict[str, Catalog]:
    views = {view: load_catalog(benchmark.catalog_path(view)) for view in benchmark.views}
    if views["plain"].ids != views.get("masked", views["plain"]).ids:
        raise ValueError(
            f"{benchmark.masked_catalog} does not hold the items of {benchmark.catalog}, in order."
        )
    return views


def split_annotations(benchmark: Benchmark, catalog: Catalog) -> dict[str, Annotations | GradedPools]:
    """Each split's judgments: annotated similar items, or graded pools (by the file's suffix)."""
    return {
        split: (load_graded_pools if is_pool_file(path) else load_annotations)(path, catalog)
        for split, path in benchmark.annotations.items()
    }


def judged_metrics(
    distances: np.ndarray, queries: Sequence[int], judgments: Annotations | GradedPools
) -> dict[str, float | list[float]]:
    """The metrics of the rows ``distances`` (from ``queries``) on one split's ``judgments``: the
    seeds' metrics of ``METRICS``, or the pools' of ``POOLED_METRICS`` with each pool's own values
    (``per_pool``), which a paired comparison of two rankings reads."""
    position = {query: row for row, query in enumerate(queries)}
    if isinstance(judgments, GradedPools):
        scores = pool_scores(pool_rows(distances, queries, judgments), judgments)
        summary = scores.summary()
        return {name: round(summary[name], 4) for name in POOLED_METRICS} | {
            "per_pool": {
                name: [round(float(value), 4) for value in scores.values[name]] for name in POOLED_METRICS
            }
        }
    metrics = evaluate_distance_rows(distances[[position[seed] for seed in judgments.seeds]], judgments)
    return {name: round(float(metrics[name]), 4) for name in METRICS}


def with_metrics(row: dict, metrics: dict) -> dict:
    """A result row: ``row`` with ``judged_metrics``' metrics, and each pool's values beside them
    (``per_pool``) when the judgments are pools."""
    row = row | {"metrics": {name: value for name, value in metrics.items() if name != "per_pool"}}
    return row | ({"per_pool": metrics["per_pool"]} if "per_pool" in metrics else {})


def judged_queries(judgments: Annotations | GradedPools) -> list[int]:
    """The items a split's judgments rank from: annotated seeds, or pools' query items."""
    return judgments.queries if isinstance(judgments, GradedPools) else judgments.seeds


def judged_count(judgments: Annotations | GradedPools) -> int:
    """What a table's heading counts of a split: seeds, or pools."""
    return len(judgments.pools) if isinstance(judgments, GradedPools) else len(judgments.seeds)


def fused(model: str) -> str:
    """The result rows' name of ``model`` ranked in the hybrid."""
    return f"{model}{HYBRID}"


def reranked(model: str) -> str:
    """The result rows' name of ``model``'s hybrid re-ranked by shared neighbours."""
    return f"{fused(model)}{RERANKED}"


def score_rows(
    benchmark: Benchmark,
    views: dict[str, Catalog],
    annotations: dict[str, Annotations],
    model: str,
    scorer: Scorer,
    train_seed: int | None = None,
) -> Iterator[dict]:
    """One result row per view and split. Each view is ranked once, from the seeds of every split
    together (a row depends on its own seed alone), so the scorer fits or encodes once per view."""
    seeds = sorted(set().union(*(judged_queries(split) for split in annotations.values())))
    for view, catalog in views.items():
        distances = scorer.distance_rows(catalog, seeds)
        for split, judgments in annotations.items():
            yield with_metrics(
                {
                    "benchmark": benchmark.name,
                    "view": view,
                    "split": split,
                    "model": model,
                    "train_seed": train_seed,
                    "seeds": judged_count(judgments),
                },
                judged_metrics(distances, seeds, judgments),
            )


def deterministic_rows(spec: QualitySpec) -> list[dict]:
    """The TF-IDF rows of every benchmark, view and split: no model, no randomness."""
    rows = []
    for benchmark in spec.benchmarks:
        views = catalog_views(benchmark)
        annotations = split_annotations(benchmark, views["plain"])
        rows.extend(score_rows(benchmark, views, annotations, TFIDF, TfidfScorer()))
    return rows


def encoder_scorers(
    spec: QualitySpec,
    benchmark: Benchmark,
    models_dir: Path,
    views: dict[str, Catalog],
    models: Sequence[str] = (TRAINED,),
    *,
    with_start: bool = True,
) -> Iterator[tuple[str, int | None, str, EncoderScorer]]:
    """(model, training seed, view, scorer): the zero-shot start's (unless ``with_start`` is
    false), then each trained model's (the default recipe's and the variants' among ``models``),
    all at the recipe's ``max_length``. Models load one at a time, as they are reached."""
    start = resolve_model_name(spec.model)
    tokenizer = AutoTokenizer.from_pretrained(start)
    plain = views["plain"]
    max_length = data_driven_max_length(tokenizer, {field: plain.texts(field) for field in plain.fields})
    encoders = [(ZERO_SHOT, None, lambda: (load_masked_lm(start), tokenizer))] if with_start else []
    encoders += [
        (
            model,
            seed,
            lambda seed=seed, model=model: load_encoder(
                model_folder(models_dir, benchmark, seed, model), device="cpu"
            ),
        )
        for model in models
        for seed in spec.train_seeds
    ]
    for name, seed, load in encoders:
        model, model_tokenizer = load()
        logger.info("Ranking %s with %s (training seed %s).", benchmark.name, name, seed)
        for view in views:
            # The encodings are kept beside the models, keyed by a fingerprint of the weights and
            # texts: a second run (another split, the tables again) ranks without encoding.
            cache = models_dir / benchmark.name / "encodings" / f"{name}-{seed}-{view}.npz".replace(" ", "_")
            scorer = EncoderScorer(
                model, model_tokenizer, name=name, max_length=max_length, batch_size=128, cache_path=cache
            )
            yield name, seed, view, scorer


def encoder_rows(
    spec: QualitySpec,
    benchmark: Benchmark,
    models_dir: Path,
    models: Sequence[str] = (TRAINED,),
    views: Sequence[str] = VIEWS,
    *,
    with_start: bool = True,
) -> Iterator[dict]:
    """Each encoder's rows (``encoder_scorers``) on ``views`` (those the benchmark has), under each
    ranking of ``ranked_as``."""
    catalogs = catalog_views(benchmark)
    annotations = split_annotations(benchmark, catalogs["plain"])
    views = {view: catalogs[view] for view in views if view in catalogs}
    scorers = encoder_scorers(spec, benchmark, models_dir, views, models, with_start=with_start)
    for name, seed, view, scorer in scorers:
        catalog = {view: views[view]}
        hybrid = with_tfidf(scorer, TABLE_TFIDF_WEIGHT, tfidf_mode=METRIC_INF)
        rankings = [
            scorer,
            hybrid,
            SharedNeighbourScorer(hybrid, TABLE_NEIGHBOURS, TABLE_NEIGHBOUR_WEIGHT),
            SharedNeighbourScorer(
                with_tfidf(scorer, DEFAULT_TFIDF_WEIGHT, tfidf_mode=DEFAULT_TFIDF_MODE),
                DEFAULT_NEIGHBOURS,
                DEFAULT_WEIGHT,
            ),
        ]
        for row_name, ranker in zip(ranked_as(name), rankings, strict=True):
            yield from score_rows(benchmark, catalog, annotations, row_name, ranker, seed)


def summarise(
    rows: Iterable[dict], trained: Sequence[str] = (TRAINED,)
) -> dict[tuple[str, str, str, str], dict[str, list[float]]]:
    """(benchmark, split, view, model) -> metric -> the values over training seeds (one for the
    untrained scorers), and the ``gains`` rows of every ``trained`` model: each trained seed minus
    its zero-shot start."""
    rows = list(rows)
    grouped: dict[tuple[str, str, str, str], dict[str, list[float]]] = {}
    for row in rows:
        key = (row["benchmark"], row["split"], row["view"], row["model"])
        entry = grouped.setdefault(key, {metric: [] for metric in row["metrics"]})
        for metric in entry:
            entry[metric].append(row["metrics"][metric])
    suffixes = ranking_suffixes(rows)
    for gain, model_name, zero_shot in (row for name in trained for row in gains(name, suffixes)):
        for (benchmark, split, view, model), entry in list(grouped.items()):
            start = grouped.get((benchmark, split, view, zero_shot))
            if model == model_name and start is not None:
                grouped[(benchmark, split, view, gain)] = {
                    metric: [value - start[metric][0] for value in values] for metric, values in entry.items()
                }
    return grouped


def cell(values: Sequence[float], signed: bool = False) -> str:
    mean = statistics.fmean(values)
    text = f"{mean:+.2f}" if signed else f"{mean:.2f}"
    return text if len(values) == 1 else f"{text} ± {statistics.stdev(values):.2f}"


def table_row(
    key: tuple[str, str, str, str], values: dict[str, list[float]], signed: bool = False
) -> list[str]:
    benchmark, _, view, model = key
    runs = len(next(iter(values.values())))
    label = model if runs == 1 else f"{model} ({runs} training seeds)"
    return [benchmark, view, label, *(cell(metric_values, signed) for metric_values in values.values())]


def trained_encoders(rows: Sequence[dict]) -> list[str]:
    """The trained encoders of ``rows`` (each once, whatever rankings it has rows under): the
    default recipe first, then the variants in file order."""
    trained = dict.fromkeys(row["model"] for row in rows if row["train_seed"] is not None)
    return sorted((name for name in trained if encoder_of(name) == name), key=lambda name: name != TRAINED)


def tables(rows: Iterable[dict], command: str = COMMAND) -> dict[str, str]:
    """One markdown table per split: benchmarks and views in file order, then the untrained
    scorers, each trained model (the default recipe, then the variants in file order) alone and
    in the hybrid, and their gains; each table headed by the seeds it counts and ``command``."""
    rows = list(rows)
    trained = trained_encoders(rows)
    grouped = summarise(rows, trained)
    benchmarks = list(dict.fromkeys(row["benchmark"] for row in rows))
    suffixes = ranking_suffixes(rows)
    gain_rows = [gain for name in trained for gain, _, _ in gains(name, suffixes)]
    models = [
        TFIDF,
        *(f"{name}{suffix}" for name in (ZERO_SHOT, *trained) for suffix in suffixes),
        *gain_rows,
    ]
    result = {}
    for split in SPLITS:
        for metrics, judged in ((METRICS, "seeds"), (POOLED_METRICS, "expert-graded pools")):
            keys = sorted(
                (key for key in grouped if key[1] == split and tuple(grouped[key]) == metrics),
                key=lambda key: (benchmarks.index(key[0]), VIEWS.index(key[2]), models.index(key[3])),
            )
            if not keys:
                continue
            chosen = {key[0] for key in keys}
            seeds = {
                row["benchmark"]: row["seeds"]
                for row in rows
                if row["split"] == split and row["benchmark"] in chosen
            }
            counts = ", ".join(f"{benchmark} {count}" for benchmark, count in seeds.items())
            body = markdown_table(
                ["benchmark", "view", "model", *(metric.upper() for metric in metrics)],
                [table_row(key, grouped[key], signed=key[3] in gain_rows) for key in keys],
                "lll" + "r" * len(metrics),
            )
            name = split if metrics == METRICS else f"{split} pools"
            result[name] = f"{split.capitalize()} {judged} ({counts}); produced by `{command}`:\n\n{body}"
    return result


TABLES_START = "<!-- quality tables: written by studies/quality_tables.py --pages -->"
TABLES_END = "<!-- end of quality tables -->"


def table_markers(name: str) -> tuple[str, str]:
    """The comments a page's block of tables ``name`` stands between (``--tables-name``)."""
    if name == "quality":
        return TABLES_START, TABLES_END
    return (
        f"<!-- {name} tables: written by studies/quality_tables.py --pages --tables-name {name} -->",
        f"<!-- end of {name} tables -->",
    )


# A figure of the reading that follows a page's tables: a mean and its spread over training seeds.
STATED_FIGURE = re.compile(r"([+\-−]?\d+\.\d\d) ± (\d+\.\d\d)")


# Prose elsewhere on a page that reads a block of tables stands between these comments.
READING_START = "<!-- reads the quality tables -->"
READING_END = "<!-- end of reading -->"


def reading_markers(name: str = "quality") -> tuple[str, str]:
    """The comments around prose elsewhere on a page that reads the block of tables ``name``."""
    return READING_START.replace("quality", name), READING_END


def reading_of_tables(page_text: str, name: str = "quality") -> str:
    """The prose that reads a page's block of tables ``name``: from the block's end marker to the
    next heading, and every block between ``reading_markers(name)`` (all of it on a page that
    quotes the tables without holding them, as README.md's summary)."""
    closing = table_markers(name)[1]
    after = page_text[page_text.index(closing) + len(closing) :] if closing in page_text else ""
    heading = re.search(r"^#", after, flags=re.MULTILINE)
    start, end = reading_markers(name)
    marked = re.findall(f"{re.escape(start)}(.*?){re.escape(end)}", page_text, flags=re.DOTALL)
    return "\n".join([after if heading is None else after[: heading.start()], *marked])


def table_figures(rows: Iterable[dict]) -> set[tuple[str, str]]:
    """Every (mean, spread) a reading of ``rows``' tables may state, to two decimals and unsigned:
    each trained row's cells, and its gain over each untrained row of the same benchmark, split
    and view (the spread is the trained row's, the untrained row being one number)."""
    grouped = summarise(rows := list(rows), trained_encoders(rows))
    figures = set()
    for (benchmark, split, view, _), values in grouped.items():
        runs = {metric: seeds for metric, seeds in values.items() if len(seeds) > 1}
        starts = [
            other
            for (b, s, v, _), other in grouped.items()
            if (b, s, v) == (benchmark, split, view) and len(next(iter(other.values()))) == 1
        ]
        for metric, seeds in runs.items():
            mean, spread = statistics.fmean(seeds), f"{statistics.stdev(seeds):.2f}"
            figures.add((f"{abs(mean):.2f}", spread))
            figures.update((f"{abs(mean - start[metric][0]):.2f}", spread) for start in starts)
    return figures


def unsupported_figures(page_text: str, rows: Iterable[dict], name: str = "quality") -> list[str]:
    """The "mean ± spread" figures of ``page_text``'s reading of its block of tables ``name`` that
    no row of ``rows`` gives (``table_figures``): the tables are rewritten by the command, the reading by hand, and a
    reading left from an earlier table is what this catches."""
    figures = table_figures(rows)
    stated = STATED_FIGURE.finditer(reading_of_tables(page_text, name))
    return [
        match.group(0)
        for match in stated
        if (f"{abs(float(match.group(1).replace('−', '-'))):.2f}", match.group(2)) not in figures
    ]


def write_tables_into(page: Path, text: str, name: str = "quality") -> None:
    """Replaces what stands between the two table markers of ``page`` with ``text``; a page
    without both markers is an error naming it (nothing else of the page is touched)."""
    content = page.read_text(encoding="utf-8")
    opening, closing = table_markers(name)
    start, end = content.find(opening), content.find(closing)
    if start < 0 or end < start:
        raise SystemExit(f"{page} has no '{opening}' ... '{closing}' block to write the tables into.")
    head = content[: start + len(opening)]
    page.write_text(f"{head}\n\n{text}\n\n{content[end:]}", encoding="utf-8")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--spec", default="studies/quality.yaml", help="The benchmark file.")
    parser.add_argument(
        "--models-dir", default="outputs/quality", help="Where trained models are kept and reused."
    )
    parser.add_argument(
        "--results", default="docs/results/quality_tables.jsonl", help="The JSON-lines results file."
    )
    parser.add_argument(
        "--only", nargs="+", help="These benchmarks only (the results of the others are kept)."
    )
    parser.add_argument(
        "--tfidf-only", action="store_true", help="Only the deterministic TF-IDF rows (seconds)."
    )
    parser.add_argument(
        "--report", action="store_true", help="Print the tables of the results file and exit."
    )
    parser.add_argument(
        "--pages",
        nargs="*",
        metavar="PAGE",
        help="Also write the tables into these markdown pages, between their table markers "
        "(docs/quality.md).",
    )
    parser.add_argument(
        "--train-seeds",
        nargs="*",
        type=int,
        help="Training seeds instead of the benchmark file's; none at all ranks only the untrained scorers.",
    )
    parser.add_argument(
        "--threads", type=int, default=os.cpu_count() or 1, help="CPU threads of each training."
    )
    parser.add_argument(
        "--models",
        nargs="+",
        default=[TRAINED],
        metavar="MODEL",
        help=f"The trained models to train and rank: {TRAINED!r} and/or the benchmark file's variants "
        "(the rows of the others are kept).",
    )
    parser.add_argument(
        "--views",
        nargs="+",
        choices=VIEWS,
        default=list(VIEWS),
        help="Rank the encoders on these views only (the rows of the others are kept).",
    )
    parser.add_argument(
        "--tables-name",
        default="quality",
        help="The name of the table markers --pages writes between (a study's tables beside the quality ones).",
    )
    return parser


def rows_left(kept: list[dict], recomputed: Callable[[dict], bool]) -> list[dict]:
    """The rows of ``kept`` that a run leaves in place: those it does not ``recompute``, and an
    untrained encoder's rows under an earlier ranking (a name this run does not write) while a
    trained row left in place is still ranked that way: they are the start of that row's gain (a
    lever screened before a default changed), and nothing would write them again."""
    again = [recomputed(row) for row in kept]
    still_ranked = {
        start_key(row)
        for row, redone in zip(kept, again, strict=True)
        if not redone and row["train_seed"] is not None
    }
    return [
        row
        for row, redone in zip(kept, again, strict=True)
        if not redone
        or (
            row["train_seed"] is None
            and row["model"] not in ranked_as(encoder_of(row["model"]))
            and start_key(row) in still_ranked
        )
    ]


def start_key(row: dict) -> tuple[str, str, str, str]:
    """What a gain row matches a trained row with its start by: benchmark, split, view and ranking."""
    return row["benchmark"], row["split"], row["view"], ranking_of(row["model"])


def holds_start_rows(rows: Iterable[dict], benchmark: Benchmark, views: Sequence[str]) -> bool:
    """Whether ``rows`` hold every row of the zero-shot start that ranking ``benchmark`` on
    ``views`` writes: each split, each ranking of ``ranked_as``."""
    held = {
        (row["benchmark"], row["view"], row["split"], row["model"])
        for row in rows
        if row["train_seed"] is None
    }
    return all(
        (benchmark.name, view, split, name) in held
        for view in views
        if view in benchmark.views
        for split in benchmark.annotations
        for name in ranked_as(ZERO_SHOT)
    )


def ranked_rows(spec: QualitySpec, options: argparse.Namespace, kept: list[dict]) -> list[dict]:
    """The results file's rows after this run: those of ``kept`` that it does not recompute, then
    TF-IDF's and, unless ``--tfidf-only``, the ranked encoders' (training what is missing).

    A run of variants alone keeps the zero-shot start's rows the file holds: they are the rows the
    default's tables share, and encoding the start again on another CPU changes some of them in
    the fourth decimal (another kernel's rounding), which would part a lever's tables from the
    tables it is read against. The start is ranked again when the run ranks the default recipe,
    ranks the untrained scorers alone (no training seed) or finds any of its rows missing."""
    chosen = [
        benchmark for benchmark in spec.benchmarks if not options.only or benchmark.name in options.only
    ]
    names = {benchmark.name for benchmark in chosen}
    variants_alone = TRAINED not in options.models and bool(spec.train_seeds)
    start_kept = {
        benchmark.name
        for benchmark in chosen
        if variants_alone and holds_start_rows(kept, benchmark, options.views)
    }

    ranked = {TFIDF, ZERO_SHOT, *options.models}

    def recomputed(row: dict) -> bool:
        """Whether this run writes the row anew: a trained model's rows of the other training
        seeds stay (seeds trained by separate calls add up)."""
        model = encoder_of(row["model"])
        if model == ZERO_SHOT and row["benchmark"] in start_kept:
            return False
        encoder = not options.tfidf_only and model in ranked and row["view"] in options.views
        this_seed = row["train_seed"] is None or row["train_seed"] in spec.train_seeds
        return row["benchmark"] in names and (model == TFIDF or (encoder and this_seed))

    rows = rows_left(kept, recomputed)
    rows += [row for row in deterministic_rows(spec) if row["benchmark"] in names]
    if not options.tfidf_only:
        models_dir = Path(options.models_dir)
        for benchmark in chosen:
            for model in options.models:
                flags = spec.variants.get(model, ())
                for seed in spec.train_seeds:
                    folder = model_folder(models_dir, benchmark, seed, model)
                    train_default(benchmark, seed, folder, options.threads, flags)
            rows += encoder_rows(
                spec,
                benchmark,
                models_dir,
                options.models,
                options.views,
                with_start=benchmark.name not in start_kept,
            )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    spec = QualitySpec.from_yaml(options.spec)
    unknown = set(options.models) - {TRAINED, *spec.variants}
    if unknown:
        parser.error(f"unknown models {sorted(unknown)}; {options.spec} defines {[TRAINED, *spec.variants]}.")
    if options.train_seeds is not None:
        spec = replace(spec, train_seeds=tuple(options.train_seeds))
    results = Path(options.results)
    if not options.report:
        rows = ranked_rows(spec, options, read_rows(results))
        results.parent.mkdir(parents=True, exist_ok=True)
        results.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    command = COMMAND if options.spec == "studies/quality.yaml" else f"{COMMAND} --spec {options.spec}"
    text = "\n\n".join(tables(read_rows(results), command).values())
    print(text)
    for page in options.pages or []:
        write_tables_into(Path(page), text, options.tables_name)


def read_rows(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


if __name__ == "__main__":
    main()
