"""Sentence-level scoring of long descriptions, and windows over them, against Metric_Inf's one
vector (issue #36, item 5), on the dev seeds of both development benchmarks, from the quality
tables' models (run benchmarks/quality_tables.py first), and of the third domain, from the
held-out tables' models (docs/quality.md, "Long descriptions read whole"):

    python benchmarks/sentence_scoring.py            # ranks, writes docs/results/sentence_scoring.jsonl
    python benchmarks/sentence_scoring.py --report   # the tables of the results file
    python benchmarks/sentence_scoring.py --spec benchmarks/held_out.yaml --results docs/results/sentence_scoring_pypi.jsonl
"""

from metricbert_trainer.scripts.sentence_scoring import main

if __name__ == "__main__":
    main()
