"""The quality study: train named variants of the wines recipe and rank each against the annotations.

    python recipes/study_wines.py                          # every variant of recipes/wines/study.yaml
    python recipes/study_wines.py --only random_other_field --seeds 42 7
    python recipes/study_wines.py --report                  # the table of docs/quality.md

Each run appends one JSON line to docs/quality_results.jsonl (see metricbert_trainer.scripts.study).
"""

from pathlib import Path

from metricbert_trainer.scripts.study import study_main

if __name__ == "__main__":
    study_main(__doc__, Path(__file__).parent / "wines" / "study.yaml", Path("docs/quality_results.jsonl"))
