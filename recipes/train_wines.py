"""Train MetricBERT on the Wine Enthusiast sample shipped in data/wines.

    accelerate launch recipes/train_wines.py                                   # the default recipe
    accelerate launch recipes/train_wines.py --config recipes/wines/bert_large.yaml
    accelerate launch recipes/train_wines.py --learning_rate 3e-5 --num_train_epochs 2

Run from the repository root (the configs name data paths relative to it).
"""

from pathlib import Path

from metricbert_trainer.scripts.train import main

DEFAULT_CONFIG = Path(__file__).parent / "wines" / "minilm.yaml"

if __name__ == "__main__":
    main(default_config=DEFAULT_CONFIG)
