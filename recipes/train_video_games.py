"""The README's command for the video-games benchmark (title + "Gameplay" section of 21,935
Wikipedia articles, 90-seed expert annotations in data/video_games): the MetricBERT script
(recipes/metricbert/train.py) with recipes/video_games/minilm.yaml as its default config.

    accelerate launch recipes/train_video_games.py --catalog path/to/video_games.txt
    accelerate launch recipes/train_video_games.py --catalog path/to/video_games.txt --sections Gameplay Synopsis

The catalog is a CSV with the columns title and sections (a Python-literal list of
(section_title, text) pairs); it is not shipped here (data/video_games/README.md). Run from the
repository root (the config names the annotations relative to it).
"""

import runpy
import sys
from pathlib import Path

RECIPES = Path(__file__).parent

if __name__ == "__main__":
    sys.argv[1:1] = ["--config", str(RECIPES / "video_games" / "minilm.yaml")]  # a --config given later wins
    runpy.run_path(str(RECIPES / "metricbert" / "train.py"), run_name="__main__")
