"""Train a multi-task NER tagger (Siskind & Shah): titles' entity tags plus a title/description term.

    accelerate launch recipes/ner/train.py                                    # recipes/wines/ner.yaml
    accelerate launch recipes/ner/train.py --metric_weight 0                  # NER alone
    accelerate launch recipes/ner/train.py --objective contrastive            # another member of the loss family

Run from the repository root (the config names data paths relative to it).
"""

from pathlib import Path

from metricbert_trainer.ner.config import NerConfig
from metricbert_trainer.scripts.train import run_recipe

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "wines" / "ner.yaml"

if __name__ == "__main__":
    # The YAML config, then the command line's flags over it; a mistake in them is one line.
    run_recipe(DEFAULT_CONFIG, NerConfig)
