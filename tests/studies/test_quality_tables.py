"""The one command behind the quality tables: the quality page's deterministic rows, README's summary of
them, and a whole run on a tiny model."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import QUICK_RUN, REPO_ROOT, flags
from quality_tables import (
    COMMAND,
    DEFAULT_RANKING,
    READING_END,
    READING_START,
    STATED_FIGURE,
    TABLES_END,
    TABLES_START,
    TFIDF,
    TRAINED,
    ZERO_SHOT,
    QualitySpec,
    deterministic_rows,
    encoder_of,
    fused,
    main,
    ranked_as,
    read_rows,
    reading_of_tables,
    reranked,
    rows_left,
    table_markers,
    tables,
    unsupported_figures,
)

SPEC = REPO_ROOT / "studies" / "quality.yaml"
HELD_OUT_SPEC = REPO_ROOT / "studies" / "held_out.yaml"


def table_lines(text: str) -> list[str]:
    return [
        line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| benchmark")
    ]


PAGE = "docs/quality.md"


def assert_page_shows_tables(page: str, name: str, rows: list[dict], spec: str) -> dict[str, str]:
    """Every row of the tables the command renders from ``rows`` (``--spec spec``) stands in
    ``page``'s block of tables ``name``; returns them by split."""
    text = (REPO_ROOT / PAGE).read_text(encoding="utf-8")
    opening, closing = table_markers(name)
    block = text[text.index(opening) : text.index(closing)]
    rendered = tables(rows, f"{COMMAND} --spec {spec}")
    for table in rendered.values():
        for line in table_lines(table):
            assert line in block, f"{page}'s {name} tables lack, or state otherwise, the row {line}"
    return rendered


@pytest.fixture(scope="module")
def tfidf_rows():
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(REPO_ROOT)  # the benchmark file names its data from the repository root
        return deterministic_rows(QualitySpec.from_yaml(SPEC))


def test_the_page_states_the_tfidf_rows_the_command_computes_on_every_split_and_view(tfidf_rows):
    """Recomputes TF-IDF (deterministic) on the category benchmarks, dev and test, plain and
    masked, and on the expert-judged pools of CSFCube's dev fold, and finds each rendered row on
    the page: editing a number there, or the data, fails this."""
    rows = tfidf_rows
    assert {(row["benchmark"], row["split"], row["view"]) for row in rows} == {
        *(
            (benchmark, split, view)
            for benchmark in ("wines", "debian")
            for split in ("dev", "test")
            for view in ("plain", "masked")
        ),
        ("csfcube", "dev", "plain"),
    }
    text = (REPO_ROOT / PAGE).read_text(encoding="utf-8")
    rendered = tables(rows)
    for split in ("dev", "test", "dev pools"):
        for line in table_lines(rendered[split]):
            assert line in text, f"{PAGE} lacks, or states otherwise, the {split} row {line}"


def test_the_results_file_holds_the_rows_the_page_shows():
    """The shipped results file renders to exactly the tables the page quotes (every model)."""
    page_text = (REPO_ROOT / PAGE).read_text(encoding="utf-8")
    rendered = tables(read_rows(REPO_ROOT / "docs" / "results" / "quality_tables.jsonl"))
    assert set(rendered) == {"dev", "test", "dev pools"}
    for table in rendered.values():
        for line in table_lines(table):
            assert line in page_text, f"{PAGE} lacks, or states otherwise, the row {line}"


def test_the_reading_of_the_tables_states_only_figures_the_tables_give():
    """The prose after the page's tables, and each reading of them marked elsewhere on the page,
    quotes each "mean ± spread" as a cell of the tables or a trained row's gain over an untrained
    row; a reading left from earlier tables fails."""
    rows = read_rows(REPO_ROOT / "docs" / "results" / "quality_tables.jsonl")
    text = (REPO_ROOT / PAGE).read_text(encoding="utf-8")
    assert unsupported_figures(text, rows) == []


def test_the_readmes_summary_quotes_only_figures_the_tables_give():
    """README.md holds no block of tables, only a summary of what training gets on each kind of
    catalog between reading markers: each "mean ± spread" in it is a cell, or a trained row's gain,
    of the quality tables (wines, Debian, CSFCube) or of the held-out tables (PyPI). A summary left
    standing after the tables were rewritten fails, and so does one that states no figure at all."""
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert TABLES_END not in readme
    for name, results in (("quality", "quality_tables.jsonl"), ("held-out", "held_out.jsonl")):
        assert STATED_FIGURE.search(reading_of_tables(readme, name)), f"README.md reads no {name} table"
        rows = read_rows(REPO_ROOT / "docs" / "results" / results)
        assert unsupported_figures(readme, rows, name) == []


def test_a_figure_the_tables_do_not_give_is_named_and_one_they_give_is_not():
    """Cells, gains over any untrained row (under another ranking too) and signs pass; a figure of
    another table, or a right mean with the wrong spread, is named, after the tables and in a marked
    reading further down alike; unmarked prose under the next heading is not read."""
    rows = [
        {
            "benchmark": "wines",
            "view": "plain",
            "split": "test",
            "model": ZERO_SHOT,
            "train_seed": None,
            "seeds": 5,
            "metrics": dict.fromkeys(("mpr", "mrr", "hr@10", "hr@100", "map", "ndcg@20"), 90.0),
        },
        *(
            {
                "benchmark": "wines",
                "view": "plain",
                "split": "test",
                "model": reranked(TRAINED),
                "train_seed": seed,
                "seeds": 5,
                "metrics": dict.fromkeys(("mpr", "mrr", "hr@10", "hr@100", "map", "ndcg@20"), value),
            }
            for seed, value in ((1, 93.0), (2, 94.0), (3, 95.0))
        ),
    ]
    reading = (
        "MPR 94.00 ± 1.00, a gain of +4.00 ± 1.00 over the start alone; then 94.00 ± 0.50 and +3.65 ± 0.54."
    )
    marked = f"{READING_START}\nfurther down, +4.00 ± 1.00 and 95.00 ± 1.00\n{READING_END}"
    page = f"{TABLES_START}\n\n{TABLES_END}\n\n{reading}\n\n## Next\n\nlater 1.23 ± 4.56\n\n{marked}"
    assert unsupported_figures(page, rows) == ["94.00 ± 0.50", "+3.65 ± 0.54", "95.00 ± 1.00"]


def test_the_lever_study_tables_on_the_quality_page_are_its_results_file():
    """docs/quality.md's lever tables (issue #36) render from docs/results/levers.jsonl, between
    their own markers, and its untrained rows are the quality tables' own."""
    rows = read_rows(REPO_ROOT / "docs" / "results" / "levers.jsonl")
    assert_page_shows_tables("docs/quality.md", "levers", rows, "studies/levers.yaml")
    quality = read_rows(REPO_ROOT / "docs" / "results" / "quality_tables.jsonl")
    screened = {row["benchmark"] for row in rows}  # the benchmarks some lever was screened on
    untrained = [
        row
        for row in quality
        if row["train_seed"] is None and row["model"] == TFIDF and row["benchmark"] in screened
    ]
    assert untrained and all(row in rows for row in untrained)


def test_the_held_out_domain_tables_are_its_results_file_with_its_tfidf_rows_recomputed():
    """The third domain's tables (data/pypi, studies/held_out.yaml) render on the quality page from
    docs/results/held_out.jsonl, between their own markers; its TF-IDF rows are recomputed here
    (deterministic: editing a number or the data fails), and the prose that reads those tables
    quotes only figures they give."""
    rows = read_rows(REPO_ROOT / "docs" / "results" / "held_out.jsonl")
    rendered = assert_page_shows_tables(PAGE, "held-out", rows, "studies/held_out.yaml")
    assert set(rendered) == {"dev", "test"}
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(REPO_ROOT)
        recomputed = deterministic_rows(QualitySpec.from_yaml(HELD_OUT_SPEC))
    assert len(recomputed) == 4 and all(row in rows for row in recomputed)
    assert unsupported_figures((REPO_ROOT / PAGE).read_text(encoding="utf-8"), rows, "held-out") == []


def test_the_lever_screened_on_the_held_out_domain_is_read_beside_the_held_out_tables_own_rows():
    """docs/quality.md's tables of the lever screened on the third domain (the guard's question,
    studies/held_out_levers.yaml) render from docs/results/held_out_levers.jsonl; every row but
    the variant's is the held-out tables' own (the same models and encodings, reused), so the
    variant is read against the default the page reports; the reading quotes only figures they give."""
    rows = read_rows(REPO_ROOT / "docs" / "results" / "held_out_levers.jsonl")
    assert_page_shows_tables("docs/quality.md", "held-out-levers", rows, "studies/held_out_levers.yaml")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(REPO_ROOT)  # the lever file names the benchmark file it extends from the repository root
        variants = set(QualitySpec.from_yaml(REPO_ROOT / "studies" / "held_out_levers.yaml").variants)
    held_out = read_rows(REPO_ROOT / "docs" / "results" / "held_out.jsonl")
    shared = [row for row in rows if encoder_of(row["model"]) not in variants]
    assert variants and len(shared) == len(held_out) and all(row in held_out for row in shared)
    page = (REPO_ROOT / "docs" / "quality.md").read_text(encoding="utf-8")
    assert unsupported_figures(page, rows, "held-out-levers") == []


def test_each_gain_row_is_each_trained_seed_minus_its_own_start():
    """Alone, the trained model is measured against the zero-shot encoder; in the hybrid, against
    the zero-shot hybrid (not the encoder alone); re-ranked, against the zero-shot re-ranked."""
    values = {
        ZERO_SHOT: [90.0],
        TRAINED: [91.0, 93.0],
        fused(ZERO_SHOT): [80.0],
        fused(TRAINED): [85.0, 87.0],
        reranked(ZERO_SHOT): [70.0],
        reranked(TRAINED): [75.0, 79.0],
    }
    rows = [
        {"benchmark": "b", "view": "plain", "split": "test", "model": model, "seeds": 3,
         "train_seed": seed if model in ranked_as(TRAINED) else None,
         "metrics": dict.fromkeys(("mpr", "mrr", "hr@10", "hr@100", "map", "ndcg@20"), value)}
        for model, found in values.items() for seed, value in enumerate(found, 1)
    ]  # fmt: skip
    lines = table_lines(tables(rows)["test"])
    assert (
        lines[3]
        == "| b | plain | default recipe (2 training seeds) | " + " | ".join(["92.00 ± 1.41"] * 6) + " |"
    )
    gains = {line.split(" | ")[2]: line.split(" | ")[3] for line in lines[-3:]}
    assert gains == {
        "default recipe - zero-shot (2 training seeds)": "+2.00 ± 1.41",
        f"{fused(TRAINED)} - {fused('zero-shot')} (2 training seeds)": "+6.00 ± 1.41",
        f"{reranked(TRAINED)} - {reranked('zero-shot')} (2 training seeds)": "+7.00 ± 2.83",
    }


def test_rows_ranked_under_earlier_defaults_keep_their_names_and_their_gain_rows():
    """A results file may hold rows ranked at an earlier TF-IDF weight (a lever screened before a
    default changed): they belong to their encoder, are shown beside today's, and are compared
    with the start ranked the same way."""
    old = " + TF-IDF 0.2 + shared neighbours 20"
    assert encoder_of(f"{TRAINED}{old}") == TRAINED and encoder_of(TFIDF) == TFIDF
    values = {ZERO_SHOT: 90.0, TRAINED: 91.0, f"{ZERO_SHOT}{old}": 70.0, f"{TRAINED}{old}": 74.0}
    rows = [
        {"benchmark": "b", "view": "plain", "split": "test", "model": model, "seeds": 3,
         "train_seed": 1 if model.startswith(TRAINED) else None,
         "metrics": dict.fromkeys(("mpr", "mrr", "hr@10", "hr@100", "map", "ndcg@20"), value)}
        for model, value in values.items()
    ]  # fmt: skip
    shown = [line.split(" | ")[2:4] for line in table_lines(tables(rows)["test"])]
    assert shown == [
        [ZERO_SHOT, "90.00"],
        [f"{ZERO_SHOT}{old}", "70.00"],
        [TRAINED, "91.00"],
        [f"{TRAINED}{old}", "74.00"],
        ["default recipe - zero-shot", "+1.00"],
        [f"{TRAINED}{old} - zero-shot{old}", "+4.00"],
    ]


def test_a_rerun_keeps_the_start_of_a_lever_ranked_under_an_earlier_default():
    """Ranking the start and the default again under today's ranking replaces their rows, old
    rankings included, but keeps the start's rows under a ranking a lever's kept rows still use:
    without them the lever's gain rows would lose their start."""
    old, older = " + TF-IDF 0.2 + shared neighbours 20", " + TF-IDF 0.1"
    named = [
        (TFIDF, None),
        (reranked(ZERO_SHOT), None),
        (f"{ZERO_SHOT}{old}", None),
        (f"{ZERO_SHOT}{older}", None),
        (f"{TRAINED}{old}", 1),
        (f"lever{old}", 1),
    ]
    kept = [
        {"benchmark": "b", "view": "plain", "split": "dev", "model": model, "train_seed": seed}
        for model, seed in named
    ]
    kept.append({**kept[2], "benchmark": "other"})  # no lever row of that benchmark is kept

    def recomputed(row):  # this run ranks TF-IDF, the start and the default recipe again
        return encoder_of(row["model"]) in (TFIDF, ZERO_SHOT, TRAINED)

    assert [(row["benchmark"], row["model"]) for row in rows_left(kept, recomputed)] == [
        ("b", f"{ZERO_SHOT}{old}"),
        ("b", f"lever{old}"),
    ]


@pytest.mark.slow
def test_the_command_trains_each_seed_once_ranks_every_view_and_split_and_reuses_the_models(
    tmp_path, files, tiny_model_path, monkeypatch
):
    """The whole command on a 60-wine catalog and the tiny model: two real recipe launches, then a
    second call that trains nothing and writes the same rows."""
    monkeypatch.chdir(REPO_ROOT)
    catalog = pd.read_csv(files / "wines.csv", dtype=str)
    masked = catalog[["id", "title", "description"]].assign(
        title=catalog.title.str.replace(r"\(.*\)", "", regex=True)
    )
    masked.to_csv(tmp_path / "masked.csv", index=False)
    spec = {
        "model": tiny_model_path,
        "train_seeds": [1, 2],
        "benchmarks": {
            "tiny": {
                "catalog": str(files / "wines.csv"),
                "masked_catalog": str(tmp_path / "masked.csv"),
                "annotations": {
                    "dev": str(files / "annotations.csv"),
                    "test": str(files / "annotations.csv"),
                },
                "recipe": [
                    "recipes/train_wines.py",
                    *flags(model_name_or_path=tiny_model_path, catalog=files / "wines.csv", **QUICK_RUN),
                    *flags(mlm_head_warmup_steps=0, max_length=32, report_to="none", plot_column=""),
                ],
            }
        },
    }
    (tmp_path / "spec.yaml").write_text(json.dumps(spec), encoding="utf-8")
    arguments = [
        "--spec",
        str(tmp_path / "spec.yaml"),
        "--models-dir",
        str(tmp_path / "models"),
        "--threads",
        "1",
    ]
    results = tmp_path / "results.jsonl"
    main([*arguments, "--results", str(results)])
    weights = [tmp_path / "models" / "tiny" / f"seed-{seed}" / "model.safetensors" for seed in (1, 2)]
    stamps = [path.stat().st_mtime_ns for path in weights]
    rows = read_rows(results)
    # Each encoder alone, in the hybrid, re-ranked at the category settings, and as evaluate and
    # recommend rank by default.
    assert ranked_as(ZERO_SHOT)[:3] == (ZERO_SHOT, fused(ZERO_SHOT), reranked(ZERO_SHOT))
    assert ranked_as(ZERO_SHOT)[3] == f"{ZERO_SHOT}{DEFAULT_RANKING}"
    assert {(row["model"], row["train_seed"]) for row in rows} == {
        (TFIDF, None),
        *((name, None) for name in ranked_as(ZERO_SHOT)),
        *((name, seed) for name in ranked_as(TRAINED) for seed in (1, 2)),
    }
    assert len(rows) == 13 * 2 * 2  # thirteen scorers, two views, two splits
    assert rows[0]["seeds"] == 3
    page = tmp_path / "page.md"
    page.write_text(f"# Before\n\n{TABLES_START}\nstale\n{TABLES_END}\n\nAfter.\n", encoding="utf-8")
    main([*arguments, "--results", str(tmp_path / "again.jsonl"), "--pages", str(page)])
    assert [path.stat().st_mtime_ns for path in weights] == stamps
    assert read_rows(tmp_path / "again.jsonl") == rows
    written = page.read_text(encoding="utf-8")
    assert written.startswith("# Before\n\n") and written.endswith(f"{TABLES_END}\n\nAfter.\n")
    assert "stale" not in written and all(line in written for line in table_lines(tables(rows)["test"]))

    # A variant of the recipe (studies/levers.yaml's kind): trained on its own, beside the
    # default recipe's models, whose rows are kept; its gain rows join the tables.
    spec["variants"] = {"no guard": ["--distill_weight", "0"]}
    (tmp_path / "spec.yaml").write_text(json.dumps(spec), encoding="utf-8")

    def rank_variant(seed: int) -> None:
        main(
            [*arguments, "--results", str(results), "--models", "no guard"]
            + ["--train-seeds", str(seed), "--views", "plain"]
        )

    # The start's rows in the file are the ones a variant alone is read against: kept, not ranked
    # again (on another CPU its encoding may differ in the fourth decimal). A marked row shows it.
    def start_row(kept: list[dict], model: str = ZERO_SHOT) -> dict:
        return next(
            row for row in kept if (row["model"], row["view"], row["split"]) == (model, "plain", "dev")
        )

    marked = read_rows(results)
    start_row(marked)["metrics"]["mpr"] = -1.0
    results.write_text("".join(json.dumps(row) + "\n" for row in marked), encoding="utf-8")
    rank_variant(1)
    assert start_row(read_rows(results))["metrics"]["mpr"] == -1.0
    assert (tmp_path / "models" / "tiny" / "variants" / "no_guard" / "seed-1" / "model.safetensors").is_file()
    assert [path.stat().st_mtime_ns for path in weights] == stamps
    with_variant = read_rows(results)
    assert [row for row in with_variant if row["model"] in ranked_as(TRAINED)] == [
        row for row in rows if row["model"] in ranked_as(TRAINED)
    ]
    assert {row["model"] for row in with_variant if row["train_seed"] == 1} == {
        *ranked_as(TRAINED),
        *ranked_as("no guard"),
    }
    assert {row["view"] for row in with_variant if row["model"] == "no guard"} == {"plain"}
    assert {row["view"] for row in with_variant if row["model"] == TRAINED} == {"plain", "masked"}
    table = tables(with_variant)["test"]
    assert "| tiny | plain | no guard - zero-shot |" in table
    # A later call for another training seed adds its rows beside the first seed's; a start row
    # missing from the file has the start ranked again, every one of its rows anew.
    fused_start = start_row(rows, fused(ZERO_SHOT))
    results.write_text(
        "".join(json.dumps(row) + "\n" for row in read_rows(results) if row != fused_start), encoding="utf-8"
    )
    rank_variant(2)
    again = read_rows(results)
    assert {row["train_seed"] for row in again if row["model"] == "no guard"} == {1, 2}
    assert start_row(again) == start_row(rows) and start_row(again, fused(ZERO_SHOT)) == fused_start
    assert table.index("| tiny | plain | default recipe (2 training seeds) |") < table.index(
        "| tiny | plain | no guard |"
    )


def test_a_benchmark_of_graded_pools_is_ranked_pool_by_pool_in_a_table_of_its_own(
    tmp_path, files, tiny_model_path, monkeypatch
):
    """An expert-judged benchmark (graded pools, no masked view, a dev split alone) beside one of
    annotated seeds: its rows carry the pools' metrics and each pool's values, and the tables give
    it a table of its own with its metrics."""
    from metricbert_trainer.data.catalog import load_catalog
    from metricbert_trainer.data.graded_pools import load_graded_pools
    from metricbert_trainer.evaluation.evaluator import score_pools
    from metricbert_trainer.evaluation.scorers import TfidfScorer

    monkeypatch.chdir(REPO_ROOT)
    ids = pd.read_csv(files / "wines.csv", dtype=str).id.tolist()
    pools = tmp_path / "pools.jsonl"
    pools.write_text(
        "".join(
            json.dumps(
                {"query_id": ids[query], "facet": facet, "candidates": ids[20:50], "relevance": grades}
            )
            + "\n"
            for query, facet, grades in (
                (1, "method", [i % 4 for i in range(30)]),
                (2, "result", [(i * 5) % 4 for i in range(30)]),
            )
        ),
        encoding="utf-8",
    )
    spec = {
        "model": tiny_model_path,
        "train_seeds": [1],
        "benchmarks": {
            "experts": {
                "catalog": str(files / "wines.csv"),
                "annotations": {"dev": str(pools)},
                "recipe": [],
            },
        },
    }
    (tmp_path / "spec.yaml").write_text(json.dumps(spec), encoding="utf-8")
    results = tmp_path / "results.jsonl"
    main(["--spec", str(tmp_path / "spec.yaml"), "--results", str(results), "--train-seeds"])
    rows = read_rows(results)
    assert [(row["model"], row["view"], row["split"], row["seeds"]) for row in rows] == [
        (name, "plain", "dev", 2) for name in (TFIDF, *ranked_as(ZERO_SHOT))
    ]
    assert all(set(row["metrics"]) == {"map", "ndcg%20", "ndcg@10"} for row in rows)
    assert all(len(row["per_pool"]["map"]) == 2 for row in rows)
    catalog = load_catalog(files / "wines.csv")
    expected = score_pools(TfidfScorer(), catalog, load_graded_pools(pools, catalog))
    assert rows[0]["metrics"]["map"] == round(expected.summary()["map"], 4)
    assert rows[0]["per_pool"]["ndcg@10"] == [round(float(value), 4) for value in expected.values["ndcg@10"]]
    rendered = tables(rows + deterministic_rows(QualitySpec.from_yaml(SPEC))[:1])
    assert set(rendered) == {"dev", "dev pools"}
    assert "| benchmark | view | model | MAP | NDCG%20 | NDCG@10 |" in rendered["dev pools"]
    assert rendered["dev pools"].startswith("Dev expert-graded pools (experts 2)")
    assert "experts" not in rendered["dev"]
