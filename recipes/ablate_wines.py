"""The loss ablation (MetricBERT's Table 2 and the related objectives) on the wine sample.

    python recipes/ablate_wines.py                                   # every variant, seed 42
    python recipes/ablate_wines.py --only metricbert mnrl --seeds 7  # second seeds
    python recipes/ablate_wines.py --report --reference metricbert --json docs/ablation/table2.json

Every variant shares the budget and seed in recipes/wines/ablation.yaml and is ranked with
Metric_Inf against the proxy annotations; docs/ablation.md discusses the results.
"""

from pathlib import Path

from metricbert_trainer.scripts.study import study_main

if __name__ == "__main__":
    study_main(
        __doc__, Path(__file__).parent / "wines" / "ablation.yaml", Path("docs/ablation/results.jsonl")
    )
