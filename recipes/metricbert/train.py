"""Train MetricBERT: the one training script for every data set, as trl keeps one script per method.

    accelerate launch recipes/metricbert/train.py --config recipes/wines/minilm.yaml
    accelerate launch recipes/metricbert/train.py --config recipes/wines/bert_large.yaml --learning_rate 3e-5
    accelerate launch recipes/metricbert/train.py --config recipes/video_games/minilm.yaml --catalog path/to/video_games.txt
    accelerate launch recipes/metricbert/train.py --catalog items.csv        # recipes/catalog/minilm.yaml

A data set's recipe is a YAML file under recipes/<dataset>/ (each folder's README lists them);
flags override it. Without --config the script uses recipes/catalog/minilm.yaml, the default
recipe for a catalog named on the command line. recipes/train_wines.py, train_video_games.py and
train_catalog.py are this script with their data set's minilm.yaml as the default config. Run from
the repository root (the configs name data paths relative to it).
"""

from pathlib import Path

from metricbert_trainer.errors import report_usage_errors
from metricbert_trainer.metricbert import MetricBertConfig
from metricbert_trainer.scripts.arguments import DataArguments, ModelArguments, parse_recipe_args
from metricbert_trainer.scripts.train import TrainingRun, train

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "catalog" / "minilm.yaml"


def main(argv: list[str] | None = None) -> TrainingRun:
    # The recipe: the YAML config, then the command line's flags over it.
    model_args, data_args, training_args = parse_recipe_args(
        (ModelArguments, DataArguments, MetricBertConfig), argv, default_config=DEFAULT_CONFIG
    )
    # Check everything that needs no model, then load the catalog and the model, train
    # MetricBertTrainer, rank the catalog, save the model with its card and plots, push it when
    # asked: one run end to end (shared with the study runner).
    return train(model_args, data_args, training_args)


if __name__ == "__main__":
    # A mistake in the options or files is one line, `train.py: error: ...`, without a traceback.
    report_usage_errors(main)
