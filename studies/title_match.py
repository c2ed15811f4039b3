"""How surely the frozen start matches a catalog's titles to their own descriptions, without labels.

The signal of the per-catalog teacher choice (issue #88 item 3; studies/levers.yaml, the rule of
"teacher joined 0.3, 50 shared neighbours at 0.25"): for random batches of 32 items, both fields
embedded by the start, the mean softmax probability (at the guard's temperature) that a title's
nearest other element of the batch is its own description. Near 1 where titles say what the
descriptions say (package summaries, paper titles); near 0 where titles are names (a wine's
producer, vintage, variety and region). It reads the title and description columns only.

    python studies/title_match.py                       # the four development catalogs
    python studies/title_match.py --catalogs my.csv     # any catalog
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.evaluation.encoding import encode_texts
from metricbert_trainer.evaluation.scorers import load_encoder
from metricbert_trainer.metricbert.losses.distillation import guide_positive_confidence

CATALOGS = (
    "data/wines/winemag-sample-5811.csv",
    "data/debian/debian-packages-4000.csv",
    "data/pypi/pypi-projects-4000.csv",
    "data/csfcube/catalog.csv",
)


def title_match(
    titles: np.ndarray, descriptions: np.ndarray, *, batch_size: int = 32, temperature: float = 0.05
) -> float:
    """The mean confidence over consecutive batches of ``batch_size`` items (a partial last one
    dropped) of the rows given, which the caller draws at random."""
    scores = []
    for start in range(0, len(titles) - batch_size + 1, batch_size):
        batch = slice(start, start + batch_size)
        elements = torch.from_numpy(np.concatenate([titles[batch], descriptions[batch]]))
        scores.append(guide_positive_confidence(elements, temperature=temperature)[:batch_size].mean().item())
    return float(np.mean(scores))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--catalogs", nargs="+", default=CATALOGS)
    parser.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--items", type=int, default=640, help="Items drawn from each catalog.")
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    model, tokenizer = load_encoder(args.model, device="cpu")
    for path in args.catalogs:
        catalog = load_catalog(path)
        rows = np.random.default_rng(args.seed).permutation(len(catalog))[: args.items]
        titles, descriptions = (
            encode_texts(model, tokenizer, [texts[row] for row in rows], max_length=args.max_length)
            for texts in (catalog.texts("title"), catalog.texts("description"))
        )
        print(f"{path}: {title_match(titles, descriptions):.3f}")


if __name__ == "__main__":
    main()
