"""Train RecoBERT (the title-description model): the one RecoBERT training script.

    accelerate launch recipes/recobert/train.py                                   # recipes/wines/recobert.yaml
    accelerate launch recipes/recobert/train.py --config recipes/wines/recobert_paper.yaml
    accelerate launch recipes/recobert/train.py --rerank_top_k 0                  # full cross-pair evaluation

recipes/train_recobert_wines.py is this script. Run from the repository root (the configs name
data paths relative to it).
"""

from pathlib import Path

from metricbert_trainer.recobert import RecoBertConfig
from metricbert_trainer.scripts.train import run_recipe

if __name__ == "__main__":
    # The YAML recipe and the flags over it; then RecoBertTrainer, the four-score ranking, the
    # model with its card, the Hub push when asked (metricbert_trainer.scripts.train).
    run_recipe(Path(__file__).resolve().parents[1] / "wines" / "recobert.yaml", RecoBertConfig)
