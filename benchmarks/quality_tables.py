"""Reproduces every quality table of docs/quality.md (dev and test seeds, plain and
masked-label views): trains the default recipe with each training seed of benchmarks/quality.yaml,
ranks every benchmark with TF-IDF, the zero-shot start and the trained models, writes
docs/results/quality_tables.jsonl and prints the tables.

    python benchmarks/quality_tables.py                  # everything (trains what outputs/quality lacks)
    python benchmarks/quality_tables.py --tfidf-only     # the deterministic rows, in seconds
    python benchmarks/quality_tables.py --report         # the tables of the results file

On a 2-core CPU that trains in fp32 (no AMX) a wine training takes about 10 minutes and a Debian one
about 20; trained models are kept in outputs/quality and reused.
"""

from metricbert_trainer.scripts.quality_tables import main

if __name__ == "__main__":
    main()
