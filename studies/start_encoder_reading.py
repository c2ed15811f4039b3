"""Another starting encoder's expert pools, untrained, read against all-MiniLM-L6-v2's by the rule
of "start all-mpnet-base-v2" in studies/levers.yaml (issue #88 item 3, the starting encoder).

    python studies/start_encoder_reading.py \
        --alone docs/results/start_encoders/csfcube-mpnet-alone.json \
        --default docs/results/start_encoders/csfcube-mpnet-default.json

``--alone`` and ``--default`` are the ``--output`` files of ``metricbert evaluate`` on CSFCube's dev
pools with the other start, ranked by the encoder alone (``--tfidf-weight 0 --shared-neighbours 0``)
and as evaluate ranks by default (no ranking flag); the commands are in docs/quality.md. The
start's rows are the quality tables' (docs/results/quality_tables.jsonl): MiniLM zero-shot ranked
the same two ways, and the default recipe's three training seeds, whose spread sets the
allowances. For each ranking this prints the other start's MAP and NDCG%20 / MiniLM's: the
difference, the allowance in brackets (MAP: a gain above twice the default recipe's spread;
NDCG%20: no lower than the larger of 0.10 and twice that spread), the pools' AP up / down and the
Wilcoxon signed-rank test's two-sided p, then whether part (a) of the rule passes. It encodes
nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from lever_reading import POOL_COLUMNS, paired_pools
from quality_tables import DEFAULT_RANKING, TRAINED, ZERO_SHOT, read_rows

from metricbert_trainer.evaluation.hybrid import DEFAULT_TFIDF_MODE, DEFAULT_TFIDF_WEIGHT
from metricbert_trainer.evaluation.shared_neighbours import DEFAULT_NEIGHBOURS, DEFAULT_WEIGHT

RANKINGS = {"encoder alone": "", "as evaluate ranks by default": DEFAULT_RANKING}
# What each report must have been ranked with: tfidf_weight, tfidf_mode, shared_neighbours and
# their weight, as evaluate records them (the mode is recorded whatever the weight).
SETTINGS = {
    "encoder alone": (0, None, 0, None),
    "as evaluate ranks by default": (
        DEFAULT_TFIDF_WEIGHT,
        DEFAULT_TFIDF_MODE,
        DEFAULT_NEIGHBOURS,
        DEFAULT_WEIGHT,
    ),
}


def start_rows(rows: list[dict], model: str) -> list[dict]:
    """The quality tables' CSFCube dev rows of ``model`` (one per training seed, or the start's one)."""
    return [
        row for row in rows if (row["benchmark"], row["split"], row["model"]) == ("csfcube", "dev", model)
    ]


def pool_values(report: dict, metric: str) -> list[float]:
    """A report's per-pool values of ``metric``, in the pools file's order."""
    return [pool[metric] for pool in report["per_pool"]]


def reading(reports: dict[str, dict], tables: Path, spreads: float, floor: float) -> tuple[list[str], bool]:
    """The table's lines, one per ranking, and whether every cell passes part (a) of the rule."""
    lines = [
        "| ranking | MAP | NDCG%20 | pools' AP up / down, Wilcoxon p |",
        "|---|---:|---:|---|",
    ]
    passed, rows = True, read_rows(tables)
    for ranking, suffix in RANKINGS.items():
        report = reports[ranking]
        settings = (
            report["tfidf_weight"],
            report["tfidf_mode"],
            report["shared_neighbours"],
            report["shared_neighbour_weight"],
        )
        wanted = SETTINGS[ranking]
        if any(want is not None and have != want for have, want in zip(settings, wanted, strict=True)):
            raise SystemExit(f"{ranking}: the report was ranked with {settings}, not {wanted}.")
        (start,) = start_rows(rows, f"{ZERO_SHOT}{suffix}")
        trained = start_rows(rows, f"{TRAINED}{suffix}")
        if len(report["per_pool"]) != len(start["per_pool"]["map"]):
            raise SystemExit(
                f"{ranking}: the report ranks {len(report['per_pool'])} pools, the tables "
                f"{len(start['per_pool']['map'])}."
            )
        cells = []
        for metric in POOL_COLUMNS:
            value, minilm = report["metrics"][metric], start["metrics"][metric]
            spread = statistics.stdev(row["metrics"][metric] for row in trained)
            difference = value - minilm
            if metric == "map":
                needed = spreads * spread
                text = f"{value:.2f} / {minilm:.2f}: {difference:+.2f}, a gain above {needed:.2f}"
                failed = difference <= needed
            else:
                allowance = max(floor, spreads * spread)
                text = f"{value:.2f} / {minilm:.2f}: {difference:+.2f} ({allowance:.2f})"
                failed = difference < -allowance
            cells.append(f"**{text}**" if failed else text)
            passed = passed and not failed
        differences = [
            other - own
            for other, own in zip(pool_values(report, "map"), start["per_pool"]["map"], strict=True)
        ]
        up, down, p_value, lower = paired_pools(differences)
        text = f"{up} / {down}, p = {p_value:.3f}"
        if lower:
            text, passed = f"**{text}**", False
        cells.append(text)
        lines.append(f"| {ranking} | " + " | ".join(cells) + " |")
    return lines, passed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--alone", required=True, help="evaluate's --output, the encoder alone.")
    parser.add_argument("--default", required=True, help="evaluate's --output, its default ranking.")
    parser.add_argument("--tables", default="docs/results/quality_tables.jsonl")
    parser.add_argument("--spreads", type=float, default=2.0)
    parser.add_argument("--floor", type=float, default=0.10)
    options = parser.parse_args(argv)
    reports = {
        ranking: json.loads(Path(path).read_text(encoding="utf-8"))
        for ranking, path in zip(RANKINGS, (options.alone, options.default), strict=True)
    }
    lines, passed = reading(reports, Path(options.tables), options.spreads, options.floor)
    print("\n".join(lines))
    print(f"\nrule (a): {'passes' if passed else 'fails'}")


if __name__ == "__main__":
    main()
