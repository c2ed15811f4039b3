"""The confirmation reading of a lever (``benchmarks/lever_confirmation.py``): its rule, and the
tables docs/quality.md quotes from it."""

import json

import pytest
from conftest import REPO_ROOT, benchmark_module

from metricbert_trainer.scripts.quality_tables import TRAINED, read_rows


@pytest.fixture(scope="module")
def confirmation():
    with benchmark_module("lever_confirmation") as module:
        yield module


def test_the_quality_page_quotes_the_rows_the_results_give(confirmation, monkeypatch, capsys):
    """Every row of the attention-dropout confirmation, dev and test, is on docs/quality.md as the
    results files give it: a changed results file or a hand-edited cell fails here."""
    monkeypatch.chdir(REPO_ROOT)
    page = (REPO_ROOT / "docs" / "quality.md").read_text(encoding="utf-8")
    for split in ("dev", "test"):
        confirmation.main(["--variant", "attention dropout off", "--split", split])
        rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
        assert len(rows) == 1 + 3 * 2  # the header, then three domains of two views
        for row in rows:
            assert row in page, row


def _write(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def test_a_variant_level_with_the_default_passes_and_one_cell_below_its_allowance_fails(
    confirmation, tmp_path, capsys
):
    """From the default's own rows (Debian, three training seeds): the same rows under a variant's
    name pass; the same with one seed's masked MAP lowered by 1.5 points (0.5 off the mean, more
    than the 0.30 allowance there) fail, and only that cell is bold."""
    default = [
        row
        for row in read_rows(REPO_ROOT / "docs" / "results" / "quality_tables.jsonl")
        if row["benchmark"] == "debian" and row["model"].startswith(TRAINED)
    ]
    _write(tmp_path / "default.jsonl", default)
    variant = [{**row, "model": row["model"].replace(TRAINED, "lever", 1)} for row in default]
    _write(tmp_path / "variant.jsonl", variant)
    pairs = ["--pairs", str(tmp_path / "variant.jsonl"), str(tmp_path / "default.jsonl")]

    confirmation.main(["--variant", "lever", *pairs])
    assert capsys.readouterr().out.endswith("rule: passes\n")

    lowered = []
    for row in variant:
        if (row["view"], row["split"], row["train_seed"]) == ("masked", "dev", 1) and "shared" in row[
            "model"
        ]:
            row = {**row, "metrics": {**row["metrics"], "map": row["metrics"]["map"] - 1.5}}
        lowered.append(row)
    _write(tmp_path / "variant.jsonl", lowered)
    confirmation.main(["--variant", "lever", *pairs])
    out = capsys.readouterr().out
    assert out.endswith("rule: fails\n")
    bold = [line for line in out.splitlines() if "**" in line]
    assert len(bold) == 1 and bold[0].startswith("| debian | masked")
    assert bold[0].split(" | ")[3].startswith("**")  # the MAP cell
