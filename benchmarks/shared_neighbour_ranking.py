"""Chooses the shared-neighbour re-ranking of `evaluate` and `recommend` on the dev seeds of both
development benchmarks, from the quality tables' models (run benchmarks/quality_tables.py first):

    python benchmarks/shared_neighbour_ranking.py            # ranks, writes docs/results/shared_neighbour_ranking.jsonl
    python benchmarks/shared_neighbour_ranking.py --report   # the table of the results file
"""

from metricbert_trainer.scripts.shared_neighbour_ranking import main

if __name__ == "__main__":
    main()
