"""The PyPI screen read in today's default ranking (``studies/held_out_screen_reading.py``): the rows
docs/quality.md quotes are the ones the results file gives, and the rule reads the allowance."""

import held_out_screen_reading
from conftest import REPO_ROOT

VARIANT = "teacher joined 0.3, 50 shared neighbours at 0.25"


def test_the_quality_page_quotes_the_rows_and_the_rule_fails_on_the_cell_below_its_allowance(
    monkeypatch, capsys
):
    monkeypatch.chdir(REPO_ROOT)
    page = (REPO_ROOT / "docs" / "quality.md").read_text(encoding="utf-8")
    for split in ("dev", "test"):
        held_out_screen_reading.main(["--variant", VARIANT, "--split", split])
        out = capsys.readouterr().out
        rows = [line for line in out.splitlines() if line.startswith("| ")]
        assert len(rows) == 1 + 4 and all(row in page for row in rows)
        bold = [row for row in rows if "**" in row]
        if split == "dev":
            # plain HR@100, -0.80 against 0.70, alone bold; encoder-alone cells are never ruled
            assert out.endswith("rule: fails\n") and len(bold) == 1
            assert bold[0].startswith("| plain | default ranking") and bold[0].endswith("(0.70)** |")
        else:
            assert not bold and "rule" not in out
