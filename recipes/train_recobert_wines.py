"""Train RecoBERT (the title-description model) on the Wine Enthusiast sample shipped in data/wines.

    accelerate launch recipes/train_recobert_wines.py                        # the paper's objective
    accelerate launch recipes/train_recobert_wines.py --mlm_weight 0 --mlm_probability 0
    accelerate launch recipes/train_recobert_wines.py --rerank_top_k 0       # full cross-pair evaluation

Run from the repository root (the configs name data paths relative to it).
"""

from pathlib import Path

from metricbert_trainer.recobert import RecoBertConfig
from metricbert_trainer.scripts.train import main

DEFAULT_CONFIG = Path(__file__).parent / "wines" / "recobert.yaml"

if __name__ == "__main__":
    main(default_config=DEFAULT_CONFIG, config_class=RecoBertConfig)
