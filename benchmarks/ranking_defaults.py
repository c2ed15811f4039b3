"""Chooses the ranking of `evaluate` and `recommend` (the hybrid's TF-IDF weight and the shared-neighbour
re-ranking, together) on the dev judgments of every development benchmark (the category benchmarks'
dev seeds and CSFCube's expert-graded dev pools), from the quality tables' models (run
benchmarks/quality_tables.py first), by the rule of metricbert_trainer/scripts/ranking_defaults.py:

    python benchmarks/ranking_defaults.py                  # ranks, writes docs/results/ranking_defaults.jsonl
    python benchmarks/ranking_defaults.py --only csfcube   # one benchmark; the rows of the others are kept
    python benchmarks/ranking_defaults.py --report         # the tables of the results file
"""

from metricbert_trainer.scripts.ranking_defaults import main

if __name__ == "__main__":
    main()
