"""Chooses TF-IDF's weight in the hybrid ranking on the dev seeds of both development benchmarks,
from the quality tables' models (run benchmarks/quality_tables.py first):

    python benchmarks/fusion_weight.py            # ranks, writes docs/results/fusion_weight.jsonl, prints
    python benchmarks/fusion_weight.py --report   # the table of the results file
"""

from metricbert_trainer.scripts.fusion_weight import main

if __name__ == "__main__":
    main()
