"""Train a multi-task NER tagger (Siskind & Shah): titles' entity tags plus a title/description term.

    accelerate launch recipes/ner/train.py                                    # recipes/wines/ner.yaml
    accelerate launch recipes/ner/train.py --metric_weight 0                  # NER alone
    accelerate launch recipes/ner/train.py --objective contrastive            # another member of the loss family

Run from the repository root (the config names data paths relative to it).
"""

from pathlib import Path

from metricbert_trainer.errors import report_usage_errors
from metricbert_trainer.scripts.ner import main as train_ner
from metricbert_trainer.scripts.train import TrainingRun

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "wines" / "ner.yaml"


def main(argv: list[str] | None = None) -> TrainingRun:
    # The recipe: the YAML config, then the command line's flags over it.
    return train_ner(argv, default_config=DEFAULT_CONFIG)


if __name__ == "__main__":
    # A mistake in the options or files is one line, `train.py: error: ...`, without a traceback.
    report_usage_errors(main)
