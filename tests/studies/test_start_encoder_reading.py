"""Another start's expert pools read against all-MiniLM-L6-v2's (``studies/start_encoder_reading.py``):
the rule's arithmetic on reports built from the quality tables' own rows, and the table that
docs/quality.md quotes from the committed reports."""

import json
import statistics

import pytest
import start_encoder_reading
from conftest import REPO_ROOT
from quality_tables import DEFAULT_RANKING, TRAINED, ZERO_SHOT, read_rows

from metricbert_trainer.evaluation.hybrid import DEFAULT_TFIDF_MODE, DEFAULT_TFIDF_WEIGHT
from metricbert_trainer.evaluation.shared_neighbours import DEFAULT_NEIGHBOURS, DEFAULT_WEIGHT

TABLES = REPO_ROOT / "docs/results/quality_tables.jsonl"
REPORTS = REPO_ROOT / "docs/results/start_encoders"


def minilm_report(suffix: str, map_shift: float) -> dict:
    """A report of evaluate holding MiniLM zero-shot's own CSFCube pools, every pool's AP raised by
    ``map_shift``, ranked as ``suffix`` says."""
    (row,) = [
        row
        for row in read_rows(TABLES)
        if (row["benchmark"], row["model"]) == ("csfcube", f"{ZERO_SHOT}{suffix}")
    ]
    pools = [{"map": value + map_shift} for value in row["per_pool"]["map"]]
    default = bool(suffix)
    return {
        "tfidf_weight": DEFAULT_TFIDF_WEIGHT if default else 0,
        "tfidf_mode": DEFAULT_TFIDF_MODE,
        "shared_neighbours": DEFAULT_NEIGHBOURS if default else 0,
        "shared_neighbour_weight": DEFAULT_WEIGHT if default else None,
        "metrics": {**row["metrics"], "map": row["metrics"]["map"] + map_shift},
        "per_pool": pools,
    }


def needed_gain(suffix: str) -> float:
    """Twice the default recipe's 3-seed spread of MAP on CSFCube, ranked as ``suffix`` says."""
    trained = [
        row["metrics"]["map"]
        for row in read_rows(TABLES)
        if (row["benchmark"], row["model"]) == ("csfcube", f"{TRAINED}{suffix}")
    ]
    assert len(trained) == 3
    return 2 * statistics.stdev(trained)


def test_the_start_against_itself_fails_and_passes_only_above_twice_the_spread_in_both_rankings():
    """The same pools gain nothing (fails); every pool raised just above the needed gain in both
    rankings passes; raised enough in one ranking only fails."""
    needed = {ranking: needed_gain(suffix) for ranking, suffix in start_encoder_reading.RANKINGS.items()}

    def verdict(shifts: dict[str, float]) -> bool:
        reports = {
            ranking: minilm_report(suffix, shifts[ranking])
            for ranking, suffix in start_encoder_reading.RANKINGS.items()
        }
        return start_encoder_reading.reading(reports, TABLES, spreads=2.0, floor=0.10)[1]

    alone, default = start_encoder_reading.RANKINGS
    assert not verdict({alone: 0.0, default: 0.0})
    assert verdict({alone: needed[alone] + 0.01, default: needed[default] + 0.01})
    assert not verdict({alone: needed[alone] + 0.01, default: needed[default] - 0.01})
    assert not verdict({alone: needed[alone] - 0.01, default: needed[default] + 0.01})


def test_a_report_ranked_otherwise_than_it_is_read_stops_the_reading():
    """A report of the default ranking given as the encoder alone's is refused, not compared."""
    reports = {ranking: minilm_report(DEFAULT_RANKING, 0.0) for ranking in start_encoder_reading.RANKINGS}
    with pytest.raises(SystemExit, match="encoder alone: the report was ranked with"):
        start_encoder_reading.reading(reports, TABLES, spreads=2.0, floor=0.10)


def test_the_quality_page_quotes_the_committed_reports(monkeypatch, capsys):
    """docs/quality.md's table of the starting encoder is what the reading prints from the reports
    in docs/results/start_encoders, line for line."""
    monkeypatch.chdir(REPO_ROOT)
    start_encoder_reading.main(
        [
            "--alone",
            str(REPORTS / "csfcube-mpnet-alone.json"),
            "--default",
            str(REPORTS / "csfcube-mpnet-default.json"),
        ]
    )
    printed = capsys.readouterr().out.splitlines()
    page = (REPO_ROOT / "docs/quality.md").read_text(encoding="utf-8")
    table = [line for line in printed if line.startswith("| ")]
    assert len(table) == 3 and all(line in page for line in table)  # the header and the two rankings
    assert printed[-1] == "rule (a): fails" and f"`{printed[-1]}`" in page
    assert json.loads((REPORTS / "csfcube-mpnet-alone.json").read_text())["max_length"] == 256
