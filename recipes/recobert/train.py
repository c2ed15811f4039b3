"""Train RecoBERT (the title-description model): the one RecoBERT training script.

    accelerate launch recipes/recobert/train.py                                   # recipes/wines/recobert.yaml
    accelerate launch recipes/recobert/train.py --config recipes/wines/recobert_paper.yaml
    accelerate launch recipes/recobert/train.py --rerank_top_k 0                  # full cross-pair evaluation

recipes/train_recobert_wines.py is this script. Run from the repository root (the configs name
data paths relative to it).
"""

from pathlib import Path

from metricbert_trainer.errors import report_usage_errors
from metricbert_trainer.recobert import RecoBertConfig
from metricbert_trainer.scripts.arguments import DataArguments, ModelArguments, parse_recipe_args
from metricbert_trainer.scripts.train import TrainingRun, train

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "wines" / "recobert.yaml"


def main(argv: list[str] | None = None) -> TrainingRun:
    # The recipe: the YAML config, then the command line's flags over it.
    model_args, data_args, training_args = parse_recipe_args(
        (ModelArguments, DataArguments, RecoBertConfig), argv, default_config=DEFAULT_CONFIG
    )
    # Check everything that needs no model, then load the catalog and the model, train
    # RecoBertTrainer, rank the catalog with the four-score inference, save the model with its
    # card, push it when asked.
    return train(model_args, data_args, training_args)


if __name__ == "__main__":
    # A mistake in the options or files is one line, `train.py: error: ...`, without a traceback.
    report_usage_errors(main)
