"""Sentence-level scoring of long descriptions against Metric_Inf's one vector (issue #36, item 5),
on the dev seeds of both development benchmarks, from the quality tables' models (run
benchmarks/quality_tables.py first):

    python benchmarks/sentence_scoring.py            # ranks, writes docs/results/sentence_scoring.jsonl
    python benchmarks/sentence_scoring.py --report   # the tables of the results file
"""

from metricbert_trainer.scripts.sentence_scoring import main

if __name__ == "__main__":
    main()
