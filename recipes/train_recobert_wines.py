"""The README's command for RecoBERT on the Wine Enthusiast sample: the RecoBERT script
(recipes/recobert/train.py), whose default config is recipes/wines/recobert.yaml.

    accelerate launch recipes/train_recobert_wines.py                        # the default recipe
    accelerate launch recipes/train_recobert_wines.py --config recipes/wines/recobert_paper.yaml
    accelerate launch recipes/train_recobert_wines.py --rerank_top_k 0       # full cross-pair evaluation

Run from the repository root (the configs name data paths relative to it).
"""

from pathlib import Path

from metricbert_trainer.recobert import RecoBertConfig
from metricbert_trainer.scripts.train import run_recipe

if __name__ == "__main__":
    run_recipe(Path(__file__).parent / "wines" / "recobert.yaml", RecoBertConfig)
