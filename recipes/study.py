"""A study: train the named variants of a recipe and rank each against the annotations.

    python recipes/study.py recipes/wines/study.yaml                         # every variant, seed 42
    python recipes/study.py recipes/debian/study.yaml --only <variant ...> --seeds 42 7
    python recipes/study.py recipes/wines/ablation.yaml --report --reference metricbert --json docs/ablation/table2.json

The YAML names the base recipe, the variants' overrides, the trainer family and the results file;
each run appends one JSON line to it (see metricbert_trainer.scripts.study), and `--report`
prints the table the docs quote (docs/quality.md, docs/ablation.md).
"""

from metricbert_trainer.scripts.study import study_main

if __name__ == "__main__":
    study_main(__doc__)
