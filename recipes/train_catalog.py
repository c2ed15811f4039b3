"""Train MetricBERT on any catalog of items with two or more text fields.

    accelerate launch recipes/train_catalog.py --catalog items.csv                # columns id, title, description
    accelerate launch recipes/train_catalog.py --catalog items.parquet --title-column name \
        --description-column summary --annotations similar.csv
    accelerate launch recipes/train_catalog.py --dataset user/products --dataset_split train \
        --id_column sku --text_columns name description tags                     # three fields
    accelerate launch recipes/train_catalog.py --catalog items.jsonl --config my_recipe.yaml

Files may be CSV, TSV, JSONL or Parquet; --dataset loads a Hugging Face dataset (a Hub id or a
local folder of data files). The defaults are the default recipe's (recipes/catalog/minilm.yaml).
"""

from pathlib import Path

from metricbert_trainer.scripts.train import main

DEFAULT_CONFIG = Path(__file__).parent / "catalog" / "minilm.yaml"

if __name__ == "__main__":
    main(default_config=DEFAULT_CONFIG)
