"""Train MetricBERT on the video-games benchmark (title + "Gameplay" section of 21,935 Wikipedia
articles), evaluated against the 90-seed expert annotations in data/video_games.

    accelerate launch recipes/train_video_games.py --catalog path/to/video_games.txt
    accelerate launch recipes/train_video_games.py --catalog path/to/video_games.txt --sections Gameplay Synopsis

The catalog is a CSV with the columns title and sections (a Python-literal list of
(section_title, text) pairs); it is not shipped here (data/video_games/README.md). Run from the
repository root (the config names the annotations relative to it).
"""

from pathlib import Path

from metricbert_trainer.scripts.train import main

DEFAULT_CONFIG = Path(__file__).parent / "video_games" / "minilm.yaml"

if __name__ == "__main__":
    main(default_config=DEFAULT_CONFIG)
