"""A screen on the held-out PyPI benchmark read in today's default ranking, where only the screened
seed of the default has rows (the default's three seeds were ranked before that ranking existed).

The rule of the per-catalog teacher (studies/levers.yaml, part (c)): the variant's training seed 1
against the default's seed 1 trained again, in the default ranking, both views, each of MPR, MAP,
NDCG@20 and HR@100 no lower than the default's minus the larger of 0.10 and twice the default's
3-seed spread of the encoder alone (the only ranking with three seeds). The encoder-alone cells are
printed beside, unruled; ``--split test`` prints the report.

    python studies/held_out_screen_reading.py --variant "teacher joined 0.3, 50 shared neighbours at 0.25"
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from quality_tables import DEFAULT_RANKING, TRAINED, read_rows

METRICS = {"mpr": "MPR", "map": "MAP", "ndcg@20": "NDCG@20", "hr@100": "HR@100"}


def seed_values(rows: list[dict], model: str, view: str, split: str, metric: str) -> dict[int, float]:
    """One metric of PyPI's rows of ``model``, by training seed."""
    return {
        row["train_seed"]: row["metrics"][metric]
        for row in rows
        if (row["benchmark"], row["model"], row["view"], row["split"]) == ("pypi", model, view, split)
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", required=True)
    parser.add_argument("--split", choices=["dev", "test"], default="dev")
    parser.add_argument("--results", default="docs/results/held_out_levers.jsonl")
    options = parser.parse_args(argv)
    rows = read_rows(Path(options.results))
    ruled, passed = options.split == "dev", True
    print("| view | ranking | " + " | ".join(METRICS.values()) + " |")
    print("|---|---|" + "---:|" * len(METRICS))
    for ranking, suffix in (("default ranking", DEFAULT_RANKING), ("encoder alone", "")):
        for view in ("plain", "masked"):
            cells = []
            for metric in METRICS:
                variant = seed_values(rows, options.variant + suffix, view, options.split, metric)[1]
                default = seed_values(rows, TRAINED + suffix, view, options.split, metric)[1]
                spread = statistics.stdev(seed_values(rows, TRAINED, view, options.split, metric).values())
                allowance, difference = max(0.10, 2 * spread), variant - default
                text = f"{variant:.2f} / {default:.2f}: {difference:+.2f}" + (
                    f" ({allowance:.2f})" if ruled else ""
                )
                if ruled and suffix and difference < -allowance:
                    text, passed = f"**{text}**", False
                cells.append(text)
            print(f"| {view} | {ranking} | " + " | ".join(cells) + " |")
    if ruled:
        print(f"\nrule: {'passes' if passed else 'fails'}")


if __name__ == "__main__":
    main()
