"""The README's command for the Wine Enthusiast sample shipped in data/wines: the MetricBERT script
(recipes/metricbert/train.py) with recipes/wines/minilm.yaml as its default config.

    accelerate launch recipes/train_wines.py                                   # the default recipe
    accelerate launch recipes/train_wines.py --config recipes/wines/bert_large.yaml
    accelerate launch recipes/train_wines.py --learning_rate 3e-5 --num_train_epochs 2

Run from the repository root (the configs name data paths relative to it).
"""

import runpy
import sys
from pathlib import Path

RECIPES = Path(__file__).parent

if __name__ == "__main__":
    sys.argv[1:1] = ["--config", str(RECIPES / "wines" / "minilm.yaml")]  # a --config given later wins
    runpy.run_path(str(RECIPES / "metricbert" / "train.py"), run_name="__main__")
