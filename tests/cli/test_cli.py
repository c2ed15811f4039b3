from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import REPO_ROOT

from metricbert_trainer.base.modeling import DEFAULT_MODEL
from metricbert_trainer.cli import main
from metricbert_trainer.cli.options import warn_of_emulated_bf16
from metricbert_trainer.evaluation.hybrid import DEFAULT_TFIDF_MODE, DEFAULT_TFIDF_WEIGHT, TFIDF_VIEWS
from metricbert_trainer.evaluation.neighbours import CONCAT
from metricbert_trainer.evaluation.shared_neighbours import DEFAULT_NEIGHBOURS, DEFAULT_WEIGHT


@pytest.fixture(scope="module")
def tiny_sentence_transformer(tiny_model_path, tmp_path_factory):
    from sentence_transformers import SentenceTransformer, models

    transformer = models.Transformer(tiny_model_path, max_seq_length=64)
    path = tmp_path_factory.mktemp("tiny-st")
    SentenceTransformer(modules=[transformer, models.Pooling(transformer.get_embedding_dimension())]).save(
        str(path)
    )
    return str(path)


def test_evaluate_prints_a_table_and_writes_json(files, tiny_model_path, tmp_path, capsys):
    output = tmp_path / "metrics.json"
    code = main(
        [
            "evaluate",
            "--model",
            f"tiny={tiny_model_path}",
            "--catalog",
            str(files / "wines.csv"),
            "--annotations",
            str(files / "annotations.csv"),
            "--max-length",
            "64",
            "--output",
            str(output),
            "--cache",
            str(tmp_path / "cache.npz"),
        ]
    )
    assert code == 0
    table = capsys.readouterr().out
    assert "| Scorer | MPR | MRR | HR@10 | HR@100 | raw MPR |" in table
    assert (
        f"| tiny (Metric_Inf) + TF-IDF {DEFAULT_TFIDF_WEIGHT:g} over joined fields + shared neighbours {DEFAULT_NEIGHBOURS} |"
        in table
    )  # the re-ranked hybrid by default
    report = json.loads(output.read_text())
    assert report["num_items"] == 60 and report["num_seeds"] == 3 and report["num_pairs"] == 6
    assert report["scorer"] == "metric_inf" and set(report["metrics"]) >= {"mpr", "raw_mpr", "hr@100"}
    assert (
        report["tfidf_weight"] == DEFAULT_TFIDF_WEIGHT
        and report["shared_neighbours"] == DEFAULT_NEIGHBOURS
        and report["tfidf_mode"] == "concat"
    )
    assert (tmp_path / "cache.npz").is_file()


def test_evaluate_ranks_graded_pools_each_on_its_own(files, tiny_model_path, tmp_path, capsys):
    """Expert judgments as graded pools: each pool ranked on its own, metrics over all pools and
    per facet, and the per-pool rows a paired comparison needs; the same numbers from a JSONL file
    and from TREC qrels, and TF-IDF alone (weight 1) scores what the library's TF-IDF scorer does."""
    from metricbert_trainer.data.catalog import load_catalog
    from metricbert_trainer.data.graded_pools import load_graded_pools
    from metricbert_trainer.evaluation.evaluator import score_pools
    from metricbert_trainer.evaluation.scorers import TfidfScorer

    ids = pd.read_csv(files / "wines.csv", dtype=str).id.tolist()
    pools = [
        {
            "query_id": ids[0],
            "facet": "taste",
            "candidates": ids[1:30],
            "relevance": [i % 4 for i in range(29)],
        },
        {
            "query_id": ids[0],
            "facet": "origin",
            "candidates": ids[30:50],
            "relevance": [(i * 7) % 4 for i in range(20)],
        },
        {
            "query_id": ids[5],
            "facet": "taste",
            "candidates": ids[3:48],
            "relevance": [(i * 3) % 4 for i in range(45)],
        },
    ]
    jsonl = tmp_path / "pools.jsonl"
    jsonl.write_text("".join(json.dumps(pool) + "\n" for pool in pools), encoding="utf-8")
    qrels = tmp_path / "pools.qrels"
    qrels.write_text(
        "".join(
            f"{pool['query_id']}#{pool['facet']} 0 {item} {grade}\n"
            for pool in pools
            for item, grade in zip(pool["candidates"], pool["relevance"], strict=True)
        ),
        encoding="utf-8",
    )
    common = ["--catalog", str(files / "wines.csv"), "--max-length", "64", "--shared-neighbours", "0"]
    reports = {}
    for path in (jsonl, qrels):
        output = tmp_path / f"{path.suffix[1:]}.json"
        command = ["evaluate", "--model", tiny_model_path, *common, "--annotations", str(path)]
        assert main([*command, "--tfidf-weight", "1", "--output", str(output)]) == 0
        reports[path.suffix] = json.loads(output.read_text())
    table = capsys.readouterr().out
    assert "| MAP | NDCG%20 | NDCG@10 |" in table and "| taste | 2 |" in table and "| origin | 1 |" in table
    report = reports[".jsonl"]
    assert report["metrics"] == reports[".qrels"]["metrics"]
    assert report["num_pools"] == 3 and report["num_judgments"] == 93
    assert [(row["query_id"], row["facet"], row["candidates"]) for row in report["per_pool"]] == [
        (ids[0], "taste", 29),
        (ids[0], "origin", 20),
        (ids[5], "taste", 44),  # the query itself is not its own candidate
    ]
    catalog = load_catalog(files / "wines.csv")
    # --tfidf-weight 1 ranks by TF-IDF alone, in the hybrid's default views.
    tfidf = TfidfScorer(mode=DEFAULT_TFIDF_MODE)
    expected = score_pools(tfidf, catalog, load_graded_pools(jsonl, catalog)).summary()
    assert report["metrics"] == pytest.approx(expected)
    assert set(report["metrics"]) == {
        *("map", "ndcg%20", "ndcg@10"),
        *(f"{facet}_{metric}" for facet in ("taste", "origin") for metric in ("map", "ndcg%20", "ndcg@10")),
    }


def test_evaluate_ranks_by_the_model_alone_or_by_tfidf_alone_at_the_weights_ends(
    files, tiny_model_path, tmp_path
):
    from metricbert_trainer.data.annotations import load_annotations
    from metricbert_trainer.data.catalog import load_catalog
    from metricbert_trainer.evaluation.evaluator import evaluate_scorer
    from metricbert_trainer.evaluation.scorers import TfidfScorer

    common = ["--catalog", str(files / "wines.csv"), "--annotations", str(files / "annotations.csv")]
    common += ["--max-length", "64", "--cache", str(tmp_path / "cache.npz"), "--shared-neighbours", "0"]
    metrics = {}
    for weight, views in (("0", []), ("1", []), ("1", ["--tfidf-mode", "metric_inf"])):
        ranking = " ".join([weight, *views[1:]])
        output = tmp_path / f"{ranking}.json"
        command = ["evaluate", "--model", tiny_model_path, *common, "--tfidf-weight", weight, *views]
        assert main([*command, "--output", str(output)]) == 0
        metrics[ranking] = json.loads(output.read_text())["metrics"]
    assert (
        main(["compare", *common[:4], "--baselines", "tfidf", "--output-dir", str(tmp_path / "tfidf")]) == 0
    )
    # compare's TF-IDF baseline is the paper's: one vectoriser per field, as --tfidf-mode metric_inf.
    tfidf = json.loads((tmp_path / "tfidf" / "results.json").read_text())["results"][0]["metrics"]
    assert metrics["1 metric_inf"] == tfidf and metrics["0"] != tfidf
    catalog = load_catalog(files / "wines.csv")
    annotations = load_annotations(files / "annotations.csv", catalog)
    joined = evaluate_scorer(TfidfScorer(mode=DEFAULT_TFIDF_MODE), catalog, annotations)
    assert metrics["1"] == pytest.approx({name: float(value) for name, value in joined.items()})


def test_evaluate_and_recommend_rerank_by_shared_neighbours_when_asked(
    files, tiny_model_path, tmp_path, capsys, caplog
):
    common = ["--model", tiny_model_path, "--catalog", str(files / "wines.csv"), "--max-length", "64"]
    common += ["--cache", str(tmp_path / "cache.npz")]
    reports = {}
    for neighbours in ("0", "5"):
        output = tmp_path / f"{neighbours}.json"
        command = [
            "evaluate",
            *common,
            "--annotations",
            str(files / "annotations.csv"),
            "--output",
            str(output),
        ]
        assert main([*command, "--shared-neighbours", neighbours, "--shared-neighbour-weight", "0.7"]) == 0
        reports[neighbours] = json.loads(output.read_text())
    assert reports["0"]["shared_neighbours"] == 0 and reports["0"]["shared_neighbour_weight"] is None
    assert reports["5"]["shared_neighbours"] == 5 and reports["5"]["shared_neighbour_weight"] == 0.7
    assert reports["5"]["metrics"] != reports["0"]["metrics"]
    assert (
        f"(Metric_Inf) + TF-IDF {DEFAULT_TFIDF_WEIGHT:g} over joined fields + shared neighbours 5 |"
        in capsys.readouterr().out
    )
    compare = [
        "compare",
        *common[2:6],
        "--annotations",
        str(files / "annotations.csv"),
        "--modes",
        "metric_inf",
    ]
    compare += [
        "--models",
        f"tiny={tiny_model_path}",
        "--tfidf-weight",
        str(DEFAULT_TFIDF_WEIGHT),
        "--output-dir",
        str(tmp_path / "c"),
    ]
    caplog.set_level("INFO", logger="metricbert_trainer")
    caplog.clear()
    assert main([*compare, "--shared-neighbours", "5", "--shared-neighbour-weight", "0.7"]) == 0
    # The model row encodes the catalog; the fused and the re-ranked rows read its vectors.
    assert caplog.text.count("Wrote embeddings to") == 1
    assert caplog.text.count("Reusing embeddings from") >= 2
    rows = json.loads((tmp_path / "c" / "results.json").read_text())["results"]
    assert [row["name"] for row in rows][
        -1
    ] == f"tiny (Metric_Inf) + TF-IDF {DEFAULT_TFIDF_WEIGHT:g} over joined fields + shared neighbours 5"
    assert rows[-1]["metrics"] == reports["5"]["metrics"]
    assert main(["recommend", *common, "--item", "7", "--shared-neighbours", "5"]) == 0
    assert (
        f", re-ranked by 5 shared neighbours (weight {DEFAULT_WEIGHT:g}).\nNearest first. This ranking "
        in (capsys.readouterr().out)
    )
    # Lists searched among 20 candidates from a FAISS index: another ranking, recorded as such.
    searched = [*command, "--shared-neighbours", "5", "--shared-neighbour-candidates", "20", "--overwrite"]
    assert main(searched) == 0
    report = json.loads((tmp_path / "5.json").read_text())
    assert report["shared_neighbour_candidates"] == 20 and reports["5"]["shared_neighbour_candidates"] == 0
    recommend = [
        "recommend",
        *common,
        "--item",
        "7",
        "--shared-neighbours",
        "5",
        "--shared-neighbour-candidates",
    ]
    assert main([*recommend, "20"]) == 0
    assert (
        f"re-ranked by 5 shared neighbours (weight {DEFAULT_WEIGHT:g}) listed among 20 candidates"
        in capsys.readouterr().out
    )
    assert main([*recommend, "3"]) == 1  # fewer candidates than neighbours
    assert "must be 0 (every item) or at least neighbours (5)" in capsys.readouterr().err


def test_recommend_lists_neighbours_without_the_item(files, tiny_model_path, capsys):
    code = main(
        [
            "recommend",
            "--model",
            tiny_model_path,
            "--catalog",
            str(files / "wines.csv"),
            "--item",
            "7",
            "--top-k",
            "5",
            "--scorer",
            "concat",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert (
        out.startswith("Most similar to ")
        and f"(id 7), by Mean fused with TF-IDF over the joined fields (weight {DEFAULT_TFIDF_WEIGHT:g}"
        in out
    )
    rows = [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| Rank")]
    assert len(rows) == 5 and all(row.split(" | ")[1] != "7" for row in rows)


def test_a_catalog_too_small_for_the_re_ranking_is_ranked_and_labelled_without_it(
    files, tiny_model_path, tmp_path, capsys, caplog
):
    """60 items and 59 shared neighbours each: every list would hold every item. The warning, the
    printed labels and the results file all say the ranking is not re-ranked (issue #90: the
    labels said it was)."""
    common = ["--model", tiny_model_path, "--catalog", str(files / "wines.csv"), "--shared-neighbours", "59"]
    assert main(["recommend", *common, "--item", "7", "--top-k", "3"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert "fused with TF-IDF" in header and "shared neighbours" not in header
    output = tmp_path / "metrics.json"
    assert (
        main(["evaluate", *common, "--annotations", str(files / "annotations.csv"), "--output", str(output)])
        == 0
    )
    assert "shared neighbours" not in capsys.readouterr().out
    assert json.loads(output.read_text())["shared_neighbours"] == 0
    assert "60 items are too few for 59 shared neighbours each: ranking without the re-ranking" in caplog.text


HOSTILE_TITLES = [
    "Red \x1b[31mwine\x1b[0m \x1b[2J",  # colour, clear screen
    "\x1b]0;owned\x07 Window title",  # OSC 0 with BEL
    "\x1b]8;;http://example.invalid\x1b\\link\x1b]8;;\x1b\\",  # OSC 8 hyperlink
    "abc\u202edcba and \u200b\u200d\ufeff",  # right-to-left override, zero-width characters
]
FORMULA_IDS = ["=cmd|' /C calc'!A0", "+1+1", "@SUM(A1)", "-2+3"]


@pytest.fixture
def hostile_catalog(files, tmp_path):
    frame = pd.read_csv(files / "wines.csv", dtype=str)[["id", "title", "description"]].head(30)
    frame.loc[: len(HOSTILE_TITLES) - 1, "title"] = HOSTILE_TITLES
    frame.loc[: len(FORMULA_IDS) - 1, "id"] = FORMULA_IDS
    path = tmp_path / "hostile.csv"
    frame.to_csv(path, index=False)
    return path


def test_recommend_shows_catalog_text_on_the_terminal_with_control_characters_escaped(
    hostile_catalog, tiny_model_path, capsys
):
    common = ["recommend", "--model", tiny_model_path, "--catalog", str(hostile_catalog), "--top-k", "29"]
    assert main([*common, "--item", "=cmd|' /C calc'!A0", "--shared-neighbours", "0"]) == 0
    out = capsys.readouterr().out
    assert not any(character in out for character in "\x1b\x07\u202e\u200b\u200d\ufeff")
    assert out.startswith("Most similar to Red \\x1b[31mwine\\x1b[0m \\x1b[2J (id =cmd|' /C calc'!A0)")
    for escaped in ("\\x1b]0;owned\\x07 Window title", "abc\\u202edcba and \\u200b\\u200d\\ufeff"):
        assert escaped in out


def test_recommend_all_writes_ids_a_spreadsheet_would_run_as_text_in_csv_only(
    hostile_catalog, tiny_model_path, tmp_path
):
    common = ["recommend", "--model", tiny_model_path, "--catalog", str(hostile_catalog), "--top-k", "29"]
    for suffix in ("csv", "tsv", "jsonl"):
        assert (
            main([*common, "--all", "--shared-neighbours", "0", "--output", str(tmp_path / f"r.{suffix}")])
            == 0
        )
    for suffix, separator in (("csv", ","), ("tsv", "\t")):
        table = pd.read_csv(tmp_path / f"r.{suffix}", dtype=str, sep=separator)
        assert table.id.unique()[:4].tolist() == [f"'{item}" for item in FORMULA_IDS]
        assert not any(cell.startswith(("=", "+", "-", "@")) for cell in [*table.id, *table.neighbour_id])
    kept = pd.read_json(tmp_path / "r.jsonl", lines=True, dtype=str)
    assert kept.id.unique()[:4].tolist() == FORMULA_IDS  # JSON lines keep every value as it is


def test_recommend_all_writes_every_items_neighbours_as_one_item_lists_them(
    files, tiny_model_path, tmp_path, capsys
):
    common = ["recommend", "--model", tiny_model_path, "--catalog", str(files / "wines.csv"), "--top-k", "4"]
    output = tmp_path / "recommendations.csv"
    assert main([*common, "--all", "--output", str(output)]) == 0
    assert capsys.readouterr().out.startswith(
        f"{output}: 240 neighbours of 60 items, by Metric_Inf fused with"
    )
    table = pd.read_csv(output, dtype=str)
    assert list(table.columns) == ["id", "rank", "neighbour_id", "distance"] and len(table) == 240
    assert main([*common, "--item", "7"]) == 0
    listed = [line.split(" | ")[1] for line in capsys.readouterr().out.splitlines() if line.startswith("| ")][
        1:
    ]
    assert listed == list(table.neighbour_id[table.id == "7"])
    refused = {
        "exists; pass --overwrite": [*common, "--all", "--output", str(output)],
        "name it with --output": [*common, "--all"],
        "pass --all, or leave them out": [*common, "--item", "7", "--output", str(tmp_path / "one.csv")],
        "pass --all, or leave them out for one --item": [*common, "--item", "7", "--candidates", "20"],
        "--candidates (3) must be 0 or at least --top-k (4)": [
            *common,
            "--all",
            "--output",
            str(tmp_path / "c.csv"),
            "--candidates",
            "3",
        ],
        "unsupported recommendations format '.xlsx'": [
            *common,
            "--all",
            "--output",
            str(tmp_path / "r.xlsx"),
        ],
        "is a file this command reads": [
            *common,
            "--all",
            "--output",
            str(files / "wines.csv"),
            "--overwrite",
        ],
    }
    for message, command in refused.items():
        assert main(command) == 1
        assert message in capsys.readouterr().err
    assert main([*common, "--all", "--output", str(output), "--overwrite"]) == 0
    searched = tmp_path / "searched.csv"
    assert main([*common, "--all", "--output", str(searched), "--candidates", "30"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("each searched among 30 candidates.")
    among = pd.read_csv(searched, dtype=str)
    assert list(among.columns) == list(table.columns) and list(among.id) == list(table.id)
    # Most of each item's neighbours lie among its 30 nearest under the model and its list.
    recall = (
        np.mean(
            [
                len(set(among.neighbour_id[among.id == i]) & set(table.neighbour_id[table.id == i]))
                for i in set(table.id)
            ]
        )
        / 4
    )
    assert recall > 0.8


def test_recommend_all_in_shards_writes_the_whole_table_in_parts(files, tiny_model_path, tmp_path, capsys):
    """``--num-shards N --shard-index I``: N calls, as N machines would make them, whose tables
    concatenated in shard order are the one call's table."""
    common = ["recommend", "--model", tiny_model_path, "--catalog", str(files / "wines.csv"), "--top-k", "4"]
    whole = tmp_path / "whole.parquet"
    assert main([*common, "--all", "--output", str(whole)]) == 0
    parts = []
    for index in range(3):
        part = tmp_path / f"part-{index}.parquet"
        assert (
            main([*common, "--all", "--output", str(part), "--num-shards", "3", "--shard-index", str(index)])
            == 0
        )
        parts.append(pd.read_parquet(part))
    out = capsys.readouterr().out
    assert "80 neighbours of 20 items (shard 2 of 3: catalog rows 40 to 59 of 60), by Metric_Inf" in out
    pd.testing.assert_frame_equal(pd.concat(parts, ignore_index=True), pd.read_parquet(whole))
    refused = {
        "--shard-index (3) must be below --num-shards (3)": [
            "--all",
            "--num-shards",
            "3",
            "--shard-index",
            "3",
        ],
        "61 shards of 60 items would leave some empty": ["--all", "--num-shards", "61"],
        "the shard options are for every item's neighbours": ["--item", "7", "--num-shards", "2"],
    }
    for message, options in refused.items():
        output = ["--output", str(tmp_path / "refused.csv")] if "--all" in options else []
        assert main([*common, *options, *output]) == 1
        assert message in capsys.readouterr().err
    assert not (tmp_path / "refused.csv").exists()


def test_encode_writes_the_cache_recommend_then_reads(files, tiny_model_path, tmp_path, capsys, caplog):
    """``metricbert encode`` fills the embedding cache that ``recommend`` with the same model,
    ``--max-length`` and ``--scorer`` reads back without encoding, answering as it does alone."""
    catalog = ["--catalog", str(files / "wines.csv"), "--max-length", "32"]
    recommend = ["recommend", "--model", tiny_model_path, *catalog, "--item", "7", "--shared-neighbours", "0"]
    assert main(recommend) == 0
    alone = capsys.readouterr().out
    cache = tmp_path / "items.npz"
    assert main(["encode", "--model", f"tiny={tiny_model_path}", *catalog, "--cache", str(cache)]) == 0
    printed = capsys.readouterr().out
    assert (
        printed.startswith(f"{cache}: 120 vectors of 60 items (title, description) by tiny")
        and cache.is_file()
    )
    with caplog.at_level("INFO", logger="metricbert_trainer.evaluation.encoding"):
        assert main([*recommend, "--cache", str(cache)]) == 0
    assert f"Reusing embeddings from {cache}" in caplog.text and capsys.readouterr().out == alone
    assert (
        main(["encode", "--model", tiny_model_path, *catalog, "--scorer", "colour", "--cache", str(cache)])
        == 1
    )
    assert "Unknown scoring mode 'colour'" in capsys.readouterr().err


def test_recommend_and_evaluate_keep_their_caches_in_the_cache_folder_unless_told_not_to(
    files, tiny_model_path, tmp_path, monkeypatch, capsys, caplog
):
    """Without --cache the embeddings, TF-IDF and shared-neighbour lists are kept in
    $METRICBERT_CACHE (else $XDG_CACHE_HOME/metricbert), and the same call made again reads all
    three back, writes nothing and answers the same; --no-cache keeps nothing."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("METRICBERT_CACHE", str(folder))
    recommend = ["recommend", "--model", tiny_model_path, "--catalog", str(files / "wines.csv")]
    recommend += ["--item", "7", "--max-length", "32", "--shared-neighbours", "5"]
    caplog.set_level("INFO", logger="metricbert_trainer")
    assert main(recommend) == 0
    first = capsys.readouterr().out
    kept = sorted(path.name for path in folder.iterdir())
    assert len(kept) == 3 and kept[0].startswith(Path(tiny_model_path).name)
    embeddings = folder / kept[0]
    assert kept[1:] == [f"{embeddings.stem}.shared-neighbours.npz", f"{embeddings.stem}.tfidf.npz"]
    caplog.clear()
    assert main(recommend) == 0
    assert capsys.readouterr().out == first
    assert f"Reusing embeddings from {embeddings} (encoded in fp32)" in caplog.text
    assert f"Reusing the TF-IDF matrices of {folder / kept[2]}" in caplog.text
    assert f"reusing the lists of {folder / kept[1]}" in caplog.text
    assert "Wrote" not in caplog.text and "kept the lists" not in caplog.text
    assert sorted(path.name for path in folder.iterdir()) == kept
    # --no-cache: nothing read, nothing written.
    monkeypatch.setenv("METRICBERT_CACHE", str(tmp_path / "unused"))
    caplog.clear()
    assert main([*recommend, "--no-cache"]) == 0
    assert capsys.readouterr().out == first
    assert not (tmp_path / "unused").exists() and "Wrote" not in caplog.text and "Reusing" not in caplog.text
    with pytest.raises(SystemExit) as refused:
        main([*recommend, "--no-cache", "--cache", str(tmp_path / "c.npz")])
    assert refused.value.code == 2 and "not allowed with argument" in capsys.readouterr().err
    # Without $METRICBERT_CACHE, under $XDG_CACHE_HOME; evaluate keeps its caches as recommend does.
    monkeypatch.delenv("METRICBERT_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    evaluate = ["evaluate", *recommend[1:5], "--annotations", str(files / "annotations.csv")]
    assert main([*evaluate, "--max-length", "32", "--shared-neighbours", "5"]) == 0
    assert sorted(path.name for path in (tmp_path / "xdg" / "metricbert").iterdir()) == kept


def test_the_cache_folder_is_trimmed_to_its_limit_least_recently_used_first_and_only_of_caches(
    files, tiny_model_path, tmp_path, monkeypatch, capsys, caplog
):
    """--cache-limit: after a call, the caches an earlier call left go, least recently used first,
    until the folder's caches fit; the call's own stay, and a user's files there are never touched."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("METRICBERT_CACHE", str(folder))
    recommend = ["recommend", "--model", tiny_model_path, "--catalog", str(files / "wines.csv")]
    recommend += ["--item", "7"]
    assert main([*recommend, "--max-length", "32"]) == 0
    earlier = sorted(folder.iterdir())
    for path in earlier:
        os.utime(path, (1_000_000, 1_000_000))  # used long ago
    np.savez(folder / "user.npz", weights=np.arange(3))
    (folder / "notes.txt").write_text("mine\n", encoding="utf-8")
    foreign = {path: path.read_bytes() for path in (folder / "user.npz", folder / "notes.txt")}
    assert main([*recommend, "--max-length", "24"]) == 0  # another setting: three files of its own
    latest = set(folder.iterdir()) - set(earlier) - set(foreign)
    assert len(latest) == 3
    limit = (sum(path.stat().st_size for path in latest) + 1) / 2**30  # the latest call's caches alone
    caplog.set_level("INFO", logger="metricbert_trainer.evaluation.cache_folder")
    assert main([*recommend, "--max-length", "24", "--cache-limit", f"{limit:.12f}"]) == 0
    assert set(folder.iterdir()) == latest | set(foreign)
    assert {path: path.read_bytes() for path in foreign} == foreign
    assert f"Removed 3 cache file(s) of {folder}, the least recently used" in caplog.text
    assert "more than the cache folder's limit" not in caplog.text
    with pytest.raises(SystemExit) as refused:
        main([*recommend, "--cache-limit", "0"])
    assert refused.value.code == 2 and "must be above 0" in capsys.readouterr().err


def test_recommend_prints_the_models_similarity_or_the_rank_alone(files, tiny_model_path, capsys):
    """Ranked by the model alone, each neighbour's similarity is 1 - its angular distance averaged
    over the fields, from 0 to 1 and falling down the list; a fused or re-ranked ranking, whose
    distances are standardised per item, prints the rank alone and says why."""
    from metricbert_trainer.data.catalog import load_catalog
    from metricbert_trainer.evaluation.encoding import encode_catalog
    from metricbert_trainer.evaluation.scorers import load_encoder

    recommend = ["recommend", "--model", tiny_model_path, "--catalog", str(files / "wines.csv")]
    recommend += ["--item", "7", "--max-length", "32", "--top-k", "5"]
    assert main([*recommend, "--tfidf-weight", "0", "--shared-neighbours", "0"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].endswith("(id 7), by Metric_Inf.")
    assert lines[1].startswith(
        "Similarity: 1 - the model's angular distance (title to title and description to description, "
        "averaged), from 0 to 1"
    )
    assert "| Rank | Id | Title | Similarity |" in lines
    rows = [line.split(" | ") for line in lines if line.startswith("| ") and not line.startswith("| Rank")]
    ids, printed = [row[1] for row in rows], [float(row[-1].rstrip(" |")) for row in rows]
    assert printed == sorted(printed, reverse=True) and all(0 <= value <= 1 for value in printed)
    catalog = load_catalog(files / "wines.csv")
    model, tokenizer = load_encoder(tiny_model_path, device="cpu")
    views = encode_catalog(model, tokenizer, catalog, max_length=32)
    item, others = catalog.ids.index("7"), [catalog.ids.index(id_) for id_ in ids]
    angles = []
    for vectors in views.values():
        unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        angles.append(np.arccos(np.clip(unit[others] @ unit[item], -1, 1)) / np.pi)
    np.testing.assert_allclose(printed, 1 - np.mean(angles, axis=0), atol=6e-4)
    assert main(recommend) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("Nearest first. This ranking adds up scores standardised per item")
    assert "| Rank | Id | Title |" in lines and not any("Similarity |" in line for line in lines)


def test_a_model_is_read_at_the_length_its_folder_records_unless_asked_otherwise(
    files, tiny_model_path, tiny_sentence_transformer, tmp_path, capsys, caplog
):
    """A recipe's model records the length it trained at for sentence-transformers (the tiny one
    here 64): every command reads it there unless ``--max-length`` says otherwise, and a model
    that records none at 128."""
    catalog = ["--catalog", str(files / "wines.csv")]
    annotations = ["--annotations", str(files / "annotations.csv")]
    evaluate = ["evaluate", *catalog, *annotations, "--shared-neighbours", "0"]
    lengths = []
    for model, asked in (
        (tiny_sentence_transformer, []),
        (tiny_sentence_transformer, ["--max-length", "24"]),
        (tiny_model_path, []),
    ):
        output = tmp_path / f"{len(lengths)}.json"
        assert main([*evaluate, "--model", model, *asked, "--output", str(output)]) == 0
        lengths.append(json.loads(output.read_text())["max_length"])
    assert lengths == [64, 24, 128]
    compared = tmp_path / "compared"
    assert (
        main(
            [
                "compare",
                *catalog,
                *annotations,
                "--models",
                tiny_sentence_transformer,
                "--output-dir",
                str(compared),
            ]
        )
        == 0
    )
    results = json.loads((compared / "results.json").read_text())
    assert results["max_length"] is None and {row["max_length"] for row in results["results"]} == {64}
    # encode, asked no length, writes the vectors that evaluate reads back at 64 without encoding.
    cache = tmp_path / "items.npz"
    capsys.readouterr()
    assert main(["encode", "--model", tiny_sentence_transformer, *catalog, "--cache", str(cache)]) == 0
    assert " 64 tokens a text; " in capsys.readouterr().out
    with caplog.at_level("INFO", logger="metricbert_trainer.evaluation.encoding"):
        assert (
            main(
                [*evaluate, "--model", tiny_sentence_transformer, "--max-length", "64", "--cache", str(cache)]
            )
            == 0
        )
    assert f"Reusing embeddings from {cache}" in caplog.text


def test_encode_evaluate_and_recommend_encode_at_the_precision_asked(
    files, tiny_model_path, tmp_path, capsys, caplog
):
    catalog = ["--catalog", str(files / "wines.csv"), "--max-length", "32"]
    titles = {}
    for precision in ("fp32", "bf16"):
        cache = tmp_path / f"{precision}.npz"
        encode = ["encode", "--model", f"tiny={tiny_model_path}", *catalog, "--cache", str(cache)]
        assert main([*encode, "--precision", precision]) == 0
        assert f"by tiny in {precision}, ready in " in capsys.readouterr().out
        with np.load(cache, allow_pickle=False) as stored:
            assert str(stored["precision"]) == precision
            titles[precision] = stored["view:title"]
    assert not np.array_equal(titles["fp32"], titles["bf16"])
    evaluate = [
        "evaluate",
        "--model",
        tiny_model_path,
        *catalog,
        "--annotations",
        str(files / "annotations.csv"),
    ]
    output = tmp_path / "metrics.json"
    assert main([*evaluate, "--precision", "bf16", "--output", str(output)]) == 0
    assert json.loads(output.read_text())["precision"] == "bf16"
    # A later call reads the cache whatever precision encoded it, and says which did.
    with caplog.at_level("INFO", logger="metricbert_trainer.evaluation.encoding"):
        recommend = [
            "recommend",
            "--model",
            tiny_model_path,
            *catalog,
            "--item",
            "7",
            "--shared-neighbours",
            "0",
        ]
        assert main([*recommend, "--cache", str(tmp_path / "bf16.npz")]) == 0
    assert f"Reusing embeddings from {tmp_path / 'bf16.npz'} (encoded in bf16)." in caplog.messages
    with pytest.raises(SystemExit) as refused:
        main([*recommend, "--precision", "fp16"])
    assert refused.value.code == 2 and "invalid choice: 'fp16'" in capsys.readouterr().err


def test_bf16_asked_of_a_cpu_without_bf16_instructions_is_warned_of(caplog):
    with caplog.at_level("WARNING", logger="metricbert_trainer.cli"):
        warn_of_emulated_bf16("bf16", "cpu", flags={"avx2", "fma", "avx512f"})
        assert "bf16 is emulated, about 4 times slower than fp32" in caplog.text
        caplog.clear()
        warn_of_emulated_bf16("bf16", "cpu", flags={"avx2", "avx512_bf16"})  # Zen 4 and 5
        warn_of_emulated_bf16("bf16", "cpu", flags={"amx_bf16"})  # Sapphire Rapids and later
        warn_of_emulated_bf16("auto", "cpu", flags={"avx2"})
        warn_of_emulated_bf16("bf16", "cuda:0", flags=set())
    assert not caplog.records


def test_the_default_models_hub_id_names_the_copy_shipped_on_pypi(files, capsys):
    """The zero-shot start is ranked offline by the name the recipes start from."""
    command = ["recommend", "--model", DEFAULT_MODEL, "--catalog", str(files / "wines.csv"), "--item", "7"]
    assert main([*command, "--max-length", "32", "--shared-neighbours", "0"]) == 0
    assert "Most similar to" in capsys.readouterr().out


def test_compare_writes_table_json_and_chart(
    files, tiny_model_path, tiny_sentence_transformer, tmp_path, capsys
):
    out_dir = tmp_path / "compare"
    code = main(
        [
            "compare",
            "--catalog",
            str(files / "wines.csv"),
            "--annotations",
            str(files / "annotations.csv"),
            "--baselines",
            "tfidf",
            "lda",
            "--lda-topics",
            "4",
            "--models",
            f"tiny={tiny_model_path}",
            "--sbert",
            f"tiny={tiny_sentence_transformer}",
            "--recobert",
            f"tiny={tiny_model_path}",
            "--rerank-top-k",
            "5",
            "--recobert-max-length",
            "96",
            "--max-length",
            "64",
            "--tfidf-weight",
            "0.3",
            "--output-dir",
            str(out_dir),
        ]
    )
    assert code == 0
    names = [
        "TF-IDF",
        "LDA",
        "tiny (Mean)",
        "tiny (Mean) + TF-IDF 0.3",
        "tiny (Metric_Inf)",
        f"tiny (Metric_Inf) + TF-IDF 0.3 over {TFIDF_VIEWS[CONCAT]}",  # the hybrid's default views
        "SBERT tiny (Mean)",
        "SBERT tiny (Metric_Inf)",
        "tiny (4 scores, top 5 re-ranked)",
    ]
    table = (out_dir / "results.md").read_text()
    assert all(f"| {name} |" in table for name in names) and table.strip() in capsys.readouterr().out
    results = json.loads((out_dir / "results.json").read_text())["results"]
    assert [row["name"] for row in results] == names
    assert all(0.0 <= row["metrics"]["mpr"] <= 100.0 for row in results)
    assert (out_dir / "results.png").read_bytes().startswith(b"\x89PNG")


def test_the_comparison_chart_draws_every_scorers_name_whole_and_apart():
    """Sixteen long scorer names, as the wine comparison of docs/evaluation.md has: each name is
    drawn inside the image and overlaps no other (under the bars, turned 45 degrees, they overlapped
    and ran off its bottom edge), and the bars keep the table's order from the top down."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from metricbert_trainer.cli.compare import comparison_figure

    names = [
        f"MetricBERT MiniLM seed {n} (Metric_Inf) + TF-IDF 0.3 + shared neighbours 50" for n in range(16)
    ]
    metrics = {name: 50.0 for name in ("mpr", "mrr", "hr@10", "hr@100")}
    rows = [{"name": name, "metrics": metrics | {f"raw_{key}": 40.0 for key in metrics}} for name in names]
    figure = comparison_figure(rows, [10, 100], title="wines: 1000 pairs, 100 seeds")
    renderer = FigureCanvasAgg(figure).get_renderer()
    figure.draw(renderer)
    image = figure.bbox
    labels = [label for label in figure.axes[0].get_yticklabels() if label.get_text()]
    boxes = [label.get_window_extent(renderer) for label in labels]
    top_down = sorted(zip(boxes, labels, strict=True), key=lambda drawn: -drawn[0].y0)
    assert [label.get_text() for _, label in top_down] == names
    assert all(
        box.x0 >= image.x0 and box.x1 <= image.x1 and box.y0 >= image.y0 and box.y1 <= image.y1
        for box in boxes
    )
    assert not any(
        first.overlaps(second) for index, first in enumerate(boxes) for second in boxes[index + 1 :]
    )


def test_the_wine_comparison_quotes_the_shipped_results():
    """Every row of docs/evaluation.md's comparison on the wine sample is the results.json its
    command wrote (docs/compare_wines, and RecoBERT's docs/compare_wines_recobert), rounded as the
    page rounds: re-running the command without updating the page, or the page without the files,
    fails here."""
    page = (REPO_ROOT / "docs" / "evaluation.md").read_text(encoding="utf-8")

    def results(folder: str) -> dict[str, dict]:
        rows = json.loads((REPO_ROOT / "docs" / folder / "results.json").read_text(encoding="utf-8"))[
            "results"
        ]
        return {row["name"]: row["metrics"] for row in rows}

    compared, recobert = results("compare_wines"), results("compare_wines_recobert")
    # The comparison ran with the ranking for category catalogs (the default until 2026-12-06).
    trained, hybrid = "MetricBERT MiniLM (train_wines.py)", " + TF-IDF 0.3 + shared neighbours 50"
    page_rows = {
        "TF-IDF (per field, sum of cosines)": [compared["TF-IDF"]],
        "LDA": [compared["LDA"]],
        "MiniLM zero-shot, Mean / Metric_Inf": [
            compared[f"MiniLM zero-shot ({mode})"] for mode in ("Mean", "Metric_Inf")
        ],
        "SBERT all-MiniLM-L6-v2, Mean / Metric_Inf": [
            compared[f"SBERT all-MiniLM-L6-v2 ({mode})"] for mode in ("Mean", "Metric_Inf")
        ],
        "RecoBERT MiniLM, TDM only, 4 scores, top 100 re-ranked": [
            recobert["RecoBERT MiniLM, TDM only, lr 1e-4 (4 scores, top 100 re-ranked)"]
        ],
        "MetricBERT (the main job's model), Mean / Metric_Inf": [
            compared[f"{trained} ({mode})"] for mode in ("Mean", "Metric_Inf")
        ],
        "MiniLM zero-shot, Metric_Inf + TF-IDF 0.3 + shared neighbours 50 (the ranking for category catalogs)": [
            compared[f"MiniLM zero-shot (Metric_Inf){hybrid}"]
        ],
        "MetricBERT, Metric_Inf + TF-IDF 0.3 + shared neighbours 50": [
            compared[f"{trained} (Metric_Inf){hybrid}"]
        ],
    }
    for label, rows in page_rows.items():
        cells = [
            " / ".join(f"{row[metric]:.1f}" for row in rows) for metric in ("mpr", "mrr", "hr@10", "hr@100")
        ]
        assert f"| {label} | {' | '.join(cells)} |" in page, label


def test_errors_are_reported_not_raised(files, tiny_model_path, tmp_path, capsys):
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps({"Portal": {"Half-Life": 1}}), encoding="utf-8")
    common = ["--catalog", str(files / "wines.csv")]
    assert main(["evaluate", "--model", tiny_model_path, *common, "--annotations", str(foreign)]) == 1
    assert "title 'Portal'" in capsys.readouterr().err
    assert main(["recommend", "--model", tiny_model_path, *common, "--item", "no-such-id"]) == 1
    assert "No item with id 'no-such-id'" in capsys.readouterr().err
    assert (
        main(
            [
                "compare",
                *common,
                "--annotations",
                str(files / "annotations.csv"),
                "--output-dir",
                str(tmp_path),
            ]
        )
        == 1
    )
    assert "Nothing to compare" in capsys.readouterr().err
    # What the folder is comes before the pickles' permission (issue #90).
    assert main(["consolidate", str(tmp_path / "missing"), str(tmp_path / "merged"), "--allow-pickle"]) == 1
    assert "missing is not a folder (it does not exist)" in capsys.readouterr().err
    for flags in ([], ["--allow-pickle"]):
        assert main(["consolidate", tiny_model_path, str(tmp_path / "merged"), *flags]) == 1
        assert "is not a DeepSpeed checkpoint" in capsys.readouterr().err
    checkpoint = tmp_path / "checkpoint-2"
    (checkpoint / "global_step2").mkdir(parents=True)
    (checkpoint / "latest").write_text("global_step2", encoding="utf-8")
    assert main(["consolidate", str(checkpoint), str(tmp_path / "merged")]) == 1
    assert "--allow-pickle" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (
            ["recommend", "--model", "m", "--item", "1", "--top-k", "0"],
            "argument --top-k: must be at least 1; got 0",
        ),
        (
            ["recommend", "--model", "m", "--item", "1", "--top-k", "ten"],
            "argument --top-k: 'ten' is not a whole number",
        ),
        (
            ["recommend", "--model", "m", "--item", "1", "--batch-size", "-4"],
            "argument --batch-size: must be at least 1",
        ),
        (
            ["evaluate", "--model", "m", "--annotations", "a", "--max-length", "1"],
            "argument --max-length: must be at least 2",
        ),
        (
            ["evaluate", "--model", "m", "--annotations", "a", "--ks", "10", "0"],
            "argument --ks: must be at least 1; got 0",
        ),
        (
            ["evaluate", "--model", "m", "--annotations", "a", "--tfidf-weight", "1.5"],
            "argument --tfidf-weight: must lie between 0 and 1; got 1.5",
        ),
        (
            ["evaluate", "--model", "m", "--annotations", "a", "--shared-neighbours", "-1"],
            "argument --shared-neighbours: must be at least 0; got -1",
        ),
        (
            ["recommend", "--model", "m", "--item", "1", "--shared-neighbour-weight", "0"],
            "argument --shared-neighbour-weight: must be above 0",
        ),
        (
            [
                "compare",
                "--annotations",
                "a",
                "--output-dir",
                "o",
                "--recobert-weights",
                "1",
                "nan",
                "1",
                "1",
            ],
            "argument --recobert-weights: must be a finite number; got nan",
        ),
        (
            ["compare", "--annotations", "a", "--output-dir", "o", "--rerank-top-k", "-1"],
            "--rerank-top-k: must be at least 0",
        ),
        (
            ["compare", "--annotations", "a", "--output-dir", "o", "--lda-topics", "0"],
            "--lda-topics: must be at least 1",
        ),
        (
            ["plot", "ckpt", "--column", "variety", "--max-items", "0"],
            "argument --max-items: must be at least 1",
        ),
    ],
)
def test_numeric_options_are_refused_when_the_command_line_is_read(command, message, capsys):
    """Before any file is opened: the catalog named here does not even exist."""
    with pytest.raises(SystemExit) as exit_:
        main([*command, "--catalog", "no-such-catalog.csv"])
    assert exit_.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith(f"metricbert {command[0]}: error: ") and message in error


@pytest.mark.slow
def test_module_entry_point_shows_help():
    result = subprocess.run(
        [sys.executable, "-m", "metricbert_trainer.cli", "--help"], capture_output=True, text=True, check=True
    )
    assert "evaluate" in result.stdout and "recommend" in result.stdout and "compare" in result.stdout
