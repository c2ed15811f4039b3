"""The README's command for the video-games benchmark (title + "Gameplay" section of 21,935
Wikipedia articles, 90-seed expert annotations in data/video_games): the MetricBERT script
(recipes/metricbert/train.py) with recipes/video_games/minilm.yaml as its default config.

    accelerate launch recipes/train_video_games.py --catalog path/to/video_games.txt
    accelerate launch recipes/train_video_games.py --catalog path/to/video_games.txt --sections Gameplay Synopsis

The catalog is a CSV with the columns title and sections (a Python-literal list of
(section_title, text) pairs); it is not shipped here (data/video_games/README.md). Run from the
repository root (the config names the annotations relative to it).
"""

from pathlib import Path

from metricbert_trainer.scripts.train import run_recipe

if __name__ == "__main__":
    run_recipe(Path(__file__).parent / "video_games" / "minilm.yaml")
