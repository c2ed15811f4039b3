"""A lever read against the default (``studies/lever_reading.py``): the rules of its screen and of
its confirmation, and the tables docs/quality.md quotes from it."""

import json
import statistics

import lever_reading
import pytest
from conftest import REPO_ROOT
from quality_tables import TRAINED, read_rows

# The ranking the screens read before 2026-12-06 (and, by mistake, three screens of 2026-12-07).
UNTIL = "--category-ranking=until-2026-12-06"
# PyPI's screen of the per-catalog teacher: the default has one seed in today's ranking, three alone.
PYPI_SCREEN = [
    "--variant",
    "teacher joined 0.3, 50 shared neighbours at 0.25",
    "--only",
    "pypi",
    "--train-seeds",
    "1",
    "--spreads-of",
    "alone",
    "--pairs",
    "docs/results/held_out_levers.jsonl",
    "docs/results/held_out.jsonl",
]


@pytest.mark.parametrize(
    ("reading", "row_counts"),
    [
        # the header, then three domains of two views, on the dev and the test seeds, each read in the
        # default ranking of its day
        (["--variant", "attention dropout off", UNTIL], (1 + 3 * 2, 1 + 3 * 2)),
        (
            ["--variant", "mnrl objective", "--train-seeds", "1", "--gains", "3", UNTIL],
            (1 + 3 * 2, 1 + 3 * 2),
        ),
        (
            ["--variant", "teacher temperature 0.25", "--train-seeds", "1", "--gains", "3", UNTIL],
            (1 + 3 * 2, 1 + 3 * 2),
        ),
        # two domains of two views, then on the dev seeds CSFCube's table: its header and two rankings
        (
            ["--variant", "paired-draw dropout masks", "--train-seeds", "1", UNTIL],
            (1 + 2 * 2 + 1 + 2, 1 + 2 * 2),
        ),
        # the same screen read again in today's default ranking (docs/quality.md gives both)
        (["--variant", "paired-draw dropout masks", "--train-seeds", "1"], (1 + 2 * 2 + 1 + 2, 1 + 2 * 2)),
        (
            [
                "--variant",
                "teacher joined 0.3, 50 shared neighbours at 0.25",
                "--train-seeds",
                "1",
                "--only",
                "wines",
                "debian",
                "csfcube",
            ],
            (1 + 2 * 2 + 1 + 2, 1 + 2 * 2),
        ),
        # the per-catalog teacher on PyPI (one seed, allowances of the encoder alone) and the encoder
        # alone on PyPI and Debian
        ([*PYPI_SCREEN, "--ruled", "mpr", "map", "ndcg@20", "hr@100"], (1 + 2, 1 + 2)),
        (
            [*PYPI_SCREEN, "--ruled", "mpr", "map", "ndcg@20", "hr@100", "--category-ranking", "alone"],
            (1 + 2, 1 + 2),
        ),
        (
            [
                "--variant",
                "teacher joined 0.3, 50 shared neighbours at 0.25",
                "--only",
                "debian",
                "--ruled",
                "mpr",
                "map",
                "ndcg@20",
                "hr@100",
                "--category-ranking",
                "alone",
            ],
            (1 + 2, 1 + 2),
        ),
    ],
    ids=[
        "attention dropout confirmation",
        "mnrl screen",
        "teacher temperature screen",
        "paired masks screen",
        "paired masks screen, today's ranking",
        "third teacher screen, today's ranking",
        "per-catalog teacher on PyPI",
        "per-catalog teacher on PyPI, encoder alone",
        "per-catalog teacher on Debian, encoder alone",
    ],
)
def test_the_quality_page_quotes_the_rows_the_results_give(reading, row_counts, monkeypatch, capsys):
    """Every row of a lever's reading on docs/quality.md, dev and test, is there as the results
    files give it: a changed results file or a hand-edited cell fails here."""
    monkeypatch.chdir(REPO_ROOT)
    page = (REPO_ROOT / "docs" / "quality.md").read_text(encoding="utf-8")
    for split, row_count in zip(("dev", "test"), row_counts, strict=True):
        lever_reading.main([*reading, "--split", split])
        rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
        assert len(rows) == row_count
        for row in rows:
            assert row in page, row


def _write(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def _debian_default_and_variant(tmp_path):
    """The default's Debian rows (three training seeds) in one file, the same rows under the
    variant name "lever" in another; the --pairs flags that name them."""
    default = [
        row
        for row in read_rows(REPO_ROOT / "docs" / "results" / "quality_tables.jsonl")
        if row["benchmark"] == "debian" and row["model"].startswith(TRAINED)
    ]
    _write(tmp_path / "default.jsonl", default)
    variant = [{**row, "model": row["model"].replace(TRAINED, "lever", 1)} for row in default]
    return variant, ["--pairs", str(tmp_path / "variant.jsonl"), str(tmp_path / "default.jsonl")]


def _shifted(rows, train_seed, view, metric, by):
    """The rows with one metric of the default ranking's dev rows of one seed and view moved."""
    return [
        {**row, "metrics": {**row["metrics"], metric: row["metrics"][metric] + by}}
        if (row["split"], row["train_seed"], row["view"]) == ("dev", train_seed, view)
        and "shared" in row["model"]
        else row
        for row in rows
    ]


def test_a_variant_level_with_the_default_passes_and_one_cell_below_its_allowance_fails(tmp_path, capsys):
    """From the default's own rows (Debian, three training seeds): the same rows under a variant's
    name pass; the same with one seed's masked MAP lowered by 2.4 points (0.8 off the mean, more
    than the 0.62 allowance there) fail, and only that cell is bold."""
    variant, pairs = _debian_default_and_variant(tmp_path)
    _write(tmp_path / "variant.jsonl", variant)
    lever_reading.main(["--variant", "lever", *pairs])
    assert capsys.readouterr().out.endswith("rule: passes\n")

    _write(tmp_path / "variant.jsonl", _shifted(variant, 1, "masked", "map", -2.4))
    lever_reading.main(["--variant", "lever", *pairs])
    out = capsys.readouterr().out
    assert out.endswith("rule: fails\n")
    bold = [line for line in out.splitlines() if "**" in line]
    assert len(bold) == 1 and bold[0].startswith("| debian | masked")
    assert bold[0].split(" | ")[3].startswith("**")  # the MAP cell


def test_a_screen_reads_its_seed_only_and_asks_for_its_gains(tmp_path, capsys):
    """A screen (--train-seeds 1 --gains 1): the default's own rows under the lever's name gain
    nothing and fail; seed 1's masked MAP raised by 1.0 (more than the default's spread there, 0.31)
    passes, that case alone listed above the spread; seed 2 lowered by 5 points changes nothing, as
    the screen reads seed 1 only; with every seed read (a confirmation) that same drop fails."""
    variant, pairs = _debian_default_and_variant(tmp_path)
    screen = ["--variant", "lever", *pairs, "--train-seeds", "1", "--gains", "1"]
    _write(tmp_path / "variant.jsonl", variant)
    lever_reading.main(screen)
    assert capsys.readouterr().out.endswith(
        "cases above the default's spread: 0 (the rule asks 1)\n\nrule: fails\n"
    )

    raised = _shifted(_shifted(variant, 1, "masked", "map", 1.0), 2, "masked", "map", -5.0)
    _write(tmp_path / "variant.jsonl", raised)
    lever_reading.main(screen)
    out = capsys.readouterr().out
    assert out.endswith("rule: passes\n")
    rows = {line.split(" | ")[1]: line for line in out.splitlines() if line.startswith("| debian")}
    assert rows["masked"].endswith("| MAP |") and rows["plain"].endswith("| - |")

    lever_reading.main(["--variant", "lever", *pairs])
    assert capsys.readouterr().out.endswith("rule: fails\n")


def test_a_variant_without_rows_is_refused(tmp_path):
    """A misspelt variant name reads no row: refused, not an empty table that "passes"."""
    variant, pairs = _debian_default_and_variant(tmp_path)
    _write(tmp_path / "variant.jsonl", variant)
    with pytest.raises(SystemExit, match="No rows of 'levers'"):
        lever_reading.main(["--variant", "levers", *pairs])


def _csfcube_default(tmp_path) -> tuple[list[dict], list[str]]:
    """The default's CSFCube rows (every ranking, every training seed), written as the default's
    results file, and the --pairs flags that read a variant's file beside it."""
    default = [
        row
        for row in read_rows(REPO_ROOT / "docs" / "results" / "quality_tables.jsonl")
        if row["benchmark"] == "csfcube" and row["model"].startswith(TRAINED)
    ]
    _write(tmp_path / "default.jsonl", default)
    return default, ["--pairs", str(tmp_path / "variant.jsonl"), str(tmp_path / "default.jsonl")]


def test_graded_pools_are_read_by_their_means_and_by_their_pools_paired(tmp_path, capsys):
    """CSFCube's rows (no MPR, a per-pool list) get a table of their own, ranked by the encoder alone
    and as evaluate ranks by default: level rows pass; pools lower one by one fail by the Wilcoxon
    test even where the means are left level; a mean below its allowance fails."""
    default, pairs = _csfcube_default(tmp_path)
    level = [{**row, "model": row["model"].replace(TRAINED, "lever", 1)} for row in default]
    screen = ["--variant", "lever", "--train-seeds", "1", *pairs]

    def read(rows) -> list[str]:
        _write(tmp_path / "variant.jsonl", rows)
        lever_reading.main(screen)
        return capsys.readouterr().out.splitlines()

    out = read(level)
    rows = [line for line in out if line.startswith("| csfcube |")]
    assert len(rows) == 2 and all("0 / 0, p = 1.00" in row for row in rows)
    assert out[-1] == "rule: passes"

    def lowered(row, pools: float, mean: float) -> dict:
        if row["train_seed"] != 1 or row["model"] != "lever":
            return row
        per_pool = {**row["per_pool"], "map": [value - pools for value in row["per_pool"]["map"]]}
        return {
            **row,
            "per_pool": per_pool,
            "metrics": {**row["metrics"], "map": row["metrics"]["map"] - mean},
        }

    out = read([lowered(row, pools=0.5, mean=0.0) for row in level])
    alone = next(line for line in out if line.startswith("| csfcube | encoder alone"))
    assert "**0 / 24, p = 0.00**" in alone and out[-1] == "rule: fails"
    out = read([lowered(row, pools=0.0, mean=5.0) for row in level])
    alone = next(line for line in out if line.startswith("| csfcube | encoder alone"))
    assert alone.count("**") == 2 and "0 / 0, p = 1.00" in alone and out[-1] == "rule: fails"


def test_a_lever_meant_to_move_expert_judgments_must_gain_beyond_the_spread(tmp_path, capsys):
    """With --pool-gain the encoder alone's MAP on the pools must rise above the default's by more
    than twice its spread: level fails, a gain inside that bound fails, one beyond it passes; the
    other rankings and metrics keep their no-harm reading."""
    default, pairs = _csfcube_default(tmp_path)
    alone = [row["metrics"]["map"] for row in default if row["model"] == TRAINED]
    needed = 2 * statistics.stdev(alone)
    seed_1 = next(
        row["metrics"]["map"] for row in default if row["model"] == TRAINED and row["train_seed"] == 1
    )

    def read(gain: float) -> list[str]:
        rows = [
            {
                **row,
                "model": row["model"].replace(TRAINED, "lever", 1),
                "metrics": {**row["metrics"], "map": seed_1 + gain}
                if row["model"] == TRAINED and row["train_seed"] == 1
                else row["metrics"],
            }
            for row in default
        ]
        _write(tmp_path / "variant.jsonl", rows)
        lever_reading.main(["--variant", "lever", "--train-seeds", "1", "--pool-gain", *pairs])
        return capsys.readouterr().out.splitlines()

    for gain, verdict in ((0.0, "fails"), (needed - 0.01, "fails"), (needed + 0.01, "passes")):
        out = read(gain)
        line = next(line for line in out if line.startswith("| csfcube | encoder alone"))
        assert f"a gain above {needed:.2f}" in line and out[-1] == f"rule: {verdict}", (gain, out)


def test_a_screen_read_with_the_encoder_alones_spreads_fails_on_its_one_cell_below(monkeypatch, capsys):
    """PyPI's default has one seed in today's ranking and three alone: --spreads-of alone takes the
    allowances from the three. The per-catalog teacher's plain HR@100 (-0.80 against 0.70) is its
    one ruled cell below; on the test seeds nothing is ruled."""
    monkeypatch.chdir(REPO_ROOT)
    lever_reading.main([*PYPI_SCREEN, "--ruled", "mpr", "map", "ndcg@20", "hr@100"])
    out = capsys.readouterr().out
    bold = [line for line in out.splitlines() if "**" in line]
    assert out.endswith("rule: fails\n") and len(bold) == 1
    assert bold[0].startswith("| pypi | plain") and bold[0].endswith("(0.70)** |")
    lever_reading.main([*PYPI_SCREEN, "--split", "test"])
    out = capsys.readouterr().out
    assert "**" not in out and "rule" not in out


def test_spreads_of_one_seed_stop_the_reading_and_name_the_option_that_reads_three(monkeypatch):
    """PyPI's default has one seed in today's ranking: its spread there does not exist, and the
    reading says so (and how to read the encoder alone's) instead of failing inside statistics."""
    monkeypatch.chdir(REPO_ROOT)
    without = [argument for argument in PYPI_SCREEN if argument not in ("--spreads-of", "alone")]
    with pytest.raises(SystemExit, match="pypi plain: the default has 1 training seed .*--spreads-of alone"):
        lever_reading.main(without)
