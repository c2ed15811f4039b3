"""``metricbert index`` and ``metricbert recommend --index``: the kept ranking answers as
``recommend --item`` does, without torch or the catalog, and refuses to answer once its catalog or
model changed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pandas as pd
import pytest

from metricbert_trainer.cli import main

# Rankings of recommend's options: the default (TF-IDF over the joined fields, re-ranked), the model
# alone (which prints similarities), TF-IDF per field with shorter lists, and the joined fields alone.
RANKINGS = {
    "default": [],
    "model alone": ["--tfidf-weight", "0", "--shared-neighbours", "0"],
    "TF-IDF per field, 5 shared neighbours": ["--tfidf-mode", "metric_inf", "--shared-neighbours", "5"],
    "joined fields, TF-IDF 0.5": ["--scorer", "concat", "--tfidf-weight", "0.5", "--shared-neighbours", "0"],
}


@pytest.fixture
def catalog(files, tmp_path):
    """The command tests' 60 wines, the first title carrying a terminal escape sequence and two
    items with the same texts (a tie that the ranking settles in catalog order)."""
    frame = pd.read_csv(files / "wines.csv", dtype=str)[["id", "title", "description"]]
    frame.loc[0, "title"] = "Red \x1b[31mwine\x1b[0m"
    frame.loc[5, ["title", "description"]] = frame.loc[4, ["title", "description"]]
    path = tmp_path / "catalog.csv"
    frame.to_csv(path, index=False)
    return path


def built_index(model: str, catalog, folder, *options: str, status: int = 0) -> list[str]:
    """Builds the index of ``options``' ranking in ``folder`` (``index`` exits with ``status``);
    returns the options of recommend."""
    common = ["--model", model, "--catalog", str(catalog), *options]
    assert main(["index", *common, "--output", str(folder)]) == status
    return common


@pytest.mark.parametrize("ranking", RANKINGS)
def test_an_index_answers_as_recommend_does_with_its_options(
    ranking, catalog, tiny_model_path, tmp_path, capsys
):
    common = built_index(tiny_model_path, catalog, tmp_path / "index", *RANKINGS[ranking])
    assert "Ask it with: metricbert recommend --index" in capsys.readouterr().out
    ids = pd.read_csv(catalog, dtype=str).id
    answers = []
    for item in (ids[0], ids[4], ids[33], ids[59]):
        assert main(["recommend", *common, "--item", item, "--top-k", "12"]) == 0
        prepared = capsys.readouterr().out
        assert main(["recommend", "--index", str(tmp_path / "index"), "--item", item, "--top-k", "12"]) == 0
        answers.append(capsys.readouterr().out)
        assert answers[-1] == prepared
    assert "\x1b" not in answers[0] and answers[0].startswith("Most similar to Red \\x1b[31mwine\\x1b[0m (id")
    assert all(("| Similarity |" in answer) == (ranking == "model alone") for answer in answers)


def test_the_indexed_answer_imports_neither_torch_nor_the_catalog_readers(catalog, tiny_model_path, tmp_path):
    built_index(tiny_model_path, catalog, tmp_path / "index")
    item = pd.read_csv(catalog, dtype=str).id[7]
    script = (
        "import sys\nfrom metricbert_trainer.cli import main\n"
        f"assert main(['recommend', '--index', {str(tmp_path / 'index')!r}, '--item', {item!r}]) == 0\n"
        "print(sorted({'torch', 'transformers', 'datasets', 'pandas', 'sklearn', 'scipy'} & set(sys.modules)))\n"
    )
    answer = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert answer.stdout.startswith("Most similar to ")
    assert answer.stdout.strip().endswith("[]")


def test_an_index_refuses_to_answer_once_its_catalog_or_model_changed(
    catalog, tiny_model_path, tmp_path, capsys
):
    model = shutil.copytree(tiny_model_path, tmp_path / "model")
    built_index(str(model), catalog, tmp_path / "index")
    ask = ["recommend", "--index", str(tmp_path / "index"), "--item", pd.read_csv(catalog, dtype=str).id[3]]
    assert main(ask) == 0
    capsys.readouterr()
    stamp = os.stat(catalog)
    os.utime(catalog, ns=(stamp.st_atime_ns, stamp.st_mtime_ns + 1_000_000))
    assert main(ask) == 1
    error = capsys.readouterr().err
    assert "changed since it was built" in error and f"metricbert index --model {model}" in error
    os.utime(catalog, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert main(ask) == 0
    capsys.readouterr()
    (model / "config.json").write_text((model / "config.json").read_text() + "\n")
    assert main(ask) == 1
    assert "the files of its model folder" in capsys.readouterr().err


def test_an_unknown_item_or_a_folder_that_is_no_index_is_an_error(catalog, tiny_model_path, tmp_path, capsys):
    built_index(tiny_model_path, catalog, tmp_path / "index")
    assert main(["recommend", "--index", str(tmp_path / "index"), "--item", "no such item"]) == 1
    assert "No item with id 'no such item' in the index" in capsys.readouterr().err
    assert main(["recommend", "--index", str(tmp_path), "--item", "1"]) == 1
    assert "is not an index" in capsys.readouterr().err


def test_index_replaces_only_an_index_and_only_when_told(catalog, tiny_model_path, tmp_path, capsys):
    index = tmp_path / "index"
    index.mkdir()  # an empty folder is the index's to fill
    built_index(tiny_model_path, catalog, index, "--shared-neighbours", "0")
    built_index(tiny_model_path, catalog, index, status=1)
    assert "exists; pass --overwrite" in capsys.readouterr().err
    built_index(tiny_model_path, catalog, index, "--overwrite")
    capsys.readouterr()
    assert main(["recommend", "--index", str(index), "--item", pd.read_csv(catalog, dtype=str).id[1]]) == 0
    assert "re-ranked by 20 shared neighbours" in capsys.readouterr().out
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "catalog.csv",
        "index",
    ]  # nothing left beside it
    users = tmp_path / "users"
    users.mkdir()
    (users / "notes.txt").write_text("mine")
    built_index(tiny_model_path, catalog, users, "--overwrite", status=1)
    assert "is a folder that is not an index" in capsys.readouterr().err
    built_index(tiny_model_path, catalog, tmp_path, "--overwrite", status=1)
    assert "holds the catalog" in capsys.readouterr().err
    assert (users / "notes.txt").read_text() == "mine"
