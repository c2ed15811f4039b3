"""Chooses the ranking of `evaluate` and `recommend` (the hybrid's TF-IDF weight and the shared-neighbour
re-ranking, together) on the dev seeds of both development benchmarks, from the quality tables' models
(run benchmarks/quality_tables.py first):

    python benchmarks/ranking_defaults.py            # ranks, writes docs/results/ranking_defaults.jsonl
    python benchmarks/ranking_defaults.py --report   # the table of the results file
"""

from metricbert_trainer.scripts.ranking_defaults import main

if __name__ == "__main__":
    main()
