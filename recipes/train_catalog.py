"""The README's command for any catalog of items with two or more text fields: the MetricBERT script
(recipes/metricbert/train.py) with recipes/catalog/minilm.yaml as its default config.

    accelerate launch recipes/train_catalog.py --catalog items.csv                # columns id, title, description
    accelerate launch recipes/train_catalog.py --catalog items.parquet --title-column name \
        --description-column summary --annotations similar.csv
    accelerate launch recipes/train_catalog.py --dataset user/products --dataset_split train \
        --id_column sku --text_columns name description tags                     # three fields
    accelerate launch recipes/train_catalog.py --catalog items.jsonl --config my_recipe.yaml

Files may be CSV, TSV, JSONL or Parquet; --dataset loads a Hugging Face dataset (a Hub id or a
local folder of data files).
"""

from pathlib import Path

from metricbert_trainer.scripts.train import run_recipe

if __name__ == "__main__":
    run_recipe(Path(__file__).parent / "catalog" / "minilm.yaml")
