"""MetricBERT's ranking metrics as a Hugging Face ``evaluate`` metric, loadable offline.

``evaluate.load("<hub id>")`` fetches a metric script from the Hub; this folder is such a script
kept in the package, so ``evaluate.load(RANKING_METRIC_PATH)`` works with no network. It computes
nothing itself: it hands its inputs to ``metricbert_trainer.evaluation.metrics``, the code the
trainer's evaluation and the ``metricbert`` command use, so the numbers are the same everywhere.

Two configurations:

* ``scores`` (default): ``predictions`` holds one row per seed of its distance to every catalog
  item (lower is nearer; ``higher_is_better=True`` for similarity scores), ``references`` the
  indices of its annotated similar items, and ``seeds`` the index of each seed itself. Returns
  filtered MPR, MRR, HR@k, their ``raw_`` variants, MAP and NDCG@20, in percent.
* ``ranks``: ``predictions`` holds the rank (1 = nearest) of each annotated item among its
  candidates and ``references`` how many candidates it had. Returns MPR, MRR and HR@k.

Example::

    import evaluate
    from metricbert_trainer.evaluation.metrics import RANKING_METRIC_PATH

    ranking = evaluate.load(RANKING_METRIC_PATH)
    ranking.compute(predictions=[[0.0, 0.2, 0.9, 0.4]], references=[[1, 3]], seeds=[0], ks=[1])
    # {'mpr': 100.0, 'mrr': 100.0, 'hr@1': 100.0, 'raw_mpr': 75.0, ...}
"""

from collections.abc import Sequence

import datasets
import evaluate
import numpy as np

from metricbert_trainer.evaluation.metrics import PairRanks, ranking_metrics, summarize

_CITATION = """\
@inproceedings{malkiel2022metricbert,
  title     = {MetricBERT: Text Representation Learning via Self-Supervised Triplet Training},
  author    = {Malkiel, Itzik and Ginzburg, Dvir and Barkan, Oren and Caciularu, Avi and Weill, Yoni and Koenigstein, Noam},
  booktitle = {ICASSP 2022},
  year      = {2022}
}
"""

_INPUTS = """
Args (configuration ``scores``):
    predictions: one row per seed, its distance (or score) to every catalog item.
    references: per seed, the indices of its annotated similar items.
    seeds: per seed, its own index in the rows (it is never its own candidate).
    ks: the cut-offs of HR@k (default 10 and 100).
    higher_is_better: the rows are similarities rather than distances (default False).
Args (configuration ``ranks``):
    predictions: the rank of each annotated item (1 = nearest; fractional on ties).
    references: how many candidates each was ranked among.
    ks: the cut-offs of HR@k.
Returns: a dict of metrics in percent.
"""

_FEATURES = {
    "default": None,  # evaluate.load's name for no configuration: ``scores``
    "scores": datasets.Features(
        {
            "predictions": datasets.Sequence(datasets.Value("float64")),
            "references": datasets.Sequence(datasets.Value("int64")),
        }
    ),
    "ranks": datasets.Features(
        {"predictions": datasets.Value("float64"), "references": datasets.Value("int64")}
    ),
}


class MetricbertRanking(evaluate.Metric):
    def _info(self) -> evaluate.MetricInfo:
        if self.config_name not in _FEATURES:
            raise ValueError(
                f"Unknown configuration {self.config_name!r}; choose one of {sorted(_FEATURES)}."
            )
        return evaluate.MetricInfo(
            description=__doc__,
            citation=_CITATION,
            inputs_description=_INPUTS,
            features=_FEATURES[self.config_name] or _FEATURES["scores"],
        )

    def _compute(
        self,
        predictions: Sequence,
        references: Sequence,
        seeds: Sequence[int] | None = None,
        ks: Sequence[int] = (10, 100),
        higher_is_better: bool = False,
    ) -> dict[str, float]:
        if self.config_name == "ranks":
            return summarize(PairRanks(np.asarray(predictions, float), np.asarray(references, int)), ks)
        if seeds is None:
            raise ValueError("The scores configuration needs seeds: the index of each seed in its row.")
        rows = np.asarray(predictions, dtype=np.float64)
        return ranking_metrics(-rows if higher_is_better else rows, list(seeds), list(references), ks)
