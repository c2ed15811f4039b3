"""The README's command for the Wine Enthusiast sample shipped in data/wines: the MetricBERT script
(recipes/metricbert/train.py) with recipes/wines/minilm.yaml as its default config.

    accelerate launch recipes/train_wines.py                                   # the default recipe
    accelerate launch recipes/train_wines.py --config recipes/wines/bert_large.yaml
    accelerate launch recipes/train_wines.py --learning_rate 3e-5 --num_train_epochs 2

Run from the repository root (the configs name data paths relative to it).
"""

from pathlib import Path

from metricbert_trainer.scripts.train import run_recipe

if __name__ == "__main__":
    run_recipe(Path(__file__).parent / "wines" / "minilm.yaml")
