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

from metricbert_trainer.scripts.train import run_recipe

if __name__ == "__main__":
    # The YAML recipe, the command line's flags over it; then preflight checks, the catalog and the
    # model, MetricBertTrainer, the final ranking, the model with its card and plots, the Hub push
    # when asked: one run end to end (metricbert_trainer.scripts.train, shared with the study runner).
    run_recipe(Path(__file__).resolve().parents[1] / "catalog" / "minilm.yaml")
