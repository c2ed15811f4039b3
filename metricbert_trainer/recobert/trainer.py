"""``RecoBertTrainer``: RecoBERT's MLM + title-description matching objective on the shared trainer."""

from __future__ import annotations

from metricbert_trainer.publishing.markdown import json_block
from metricbert_trainer.publishing.model_card import CardMethod
from metricbert_trainer.recobert.collator import RecoBertCollator
from metricbert_trainer.recobert.config import RecoBertConfig
from metricbert_trainer.recobert.forward import enable_pair_forward
from metricbert_trainer.recobert.inference import RecoBertRankingEvaluator
from metricbert_trainer.recobert.scores import tdm_loss, tdm_score
from metricbert_trainer.training.trainer import CatalogTrainer


class RecoBertTrainer(CatalogTrainer):
    """Trains an ``AutoModelForMaskedLM`` with ``L = mlm_weight * L_MLM + tdm_weight * L_TDM``.

    Each training example is one joint (title, description) input whose description is the item's
    own or another's (``RecoBertCollator``); the title and description vectors are mean-pooled
    over their segments of the joint output and scored by ``C_TDM``. Each step logs ``mlm_loss``,
    ``tdm_loss``, ``tdm_accuracy`` (pairs on the right side of 0.5) and the mean score of matched
    and mismatched pairs (``tdm_score_matched``, ``tdm_score_mismatched``), whose gap is what
    inference ranks on. Ranking evaluation, logging and the model card are ``CatalogTrainer``'s;
    pass a ``recobert.inference.RecoBertRankingEvaluator`` to rank with the four-score inference.
    """

    _tag_names = ["recobert", "metricbert", "sentence-similarity"]
    card_method = CardMethod(
        name="A RecoBERT title-description model (Malkiel et al., *RecoBERT*, Findings of EMNLP 2020)",
        family="RecoBERT",
        goal="to score whether the {fields} of a pair belong to the same item",
        inference="Each field is embedded by mean pooling its tokens of the last layer; RecoBERT's inference "
        "ranks candidates by four z-normalised scores, the cosines of the descriptions and of the titles and "
        "the title-description matching score both ways (`metricbert_trainer.recobert.RecoBertScorer`). The "
        "snippets below give the mean-pooled vectors the two cosines compare.",
        trainer="RecoBertTrainer",
        script="recipes/recobert/train.py",
        citation="""@inproceedings{malkiel2020recobert,
  title     = {RecoBERT: A Catalog Language Model for Text-Based Recommendations},
  author    = {Malkiel, Itzik and Barkan, Oren and Caciularu, Avi and Razin, Noam and Katz, Ori and Koenigstein, Noam},
  booktitle = {Findings of the Association for Computational Linguistics: EMNLP 2020},
  year      = {2020}
}""",
    )

    config_class = RecoBertConfig

    def __init__(self, model, args: RecoBertConfig | None = None, *positional, **kwargs) -> None:
        """``CatalogTrainer``'s arguments; ``model`` may be a Hub id or folder and ``args`` default
        to ``RecoBertConfig``'s (see ``MetricBertTrainer``)."""
        model, args, processing_class = self.resolve_model_and_args(
            model, args, kwargs.get("processing_class")
        )
        if processing_class is not None:
            kwargs["processing_class"] = processing_class
        enable_pair_forward(model)
        super().__init__(model, args, *positional, **kwargs)

    @classmethod
    def default_ranking_evaluator(
        cls, catalog, annotations, args: RecoBertConfig
    ) -> RecoBertRankingEvaluator:
        """The four-score inference with the configured weights, re-ranking the top ``rerank_top_k``."""
        return RecoBertRankingEvaluator(
            catalog=catalog,
            annotations=annotations,
            batch_size=args.per_device_eval_batch_size,
            max_length=args.max_length,
            weights=args.inference_weights,
            rerank_top_k=args.rerank_top_k,
            show_progress=not args.disable_tqdm,
        )

    def build_collator(self, tokenizer, args: RecoBertConfig) -> RecoBertCollator:
        return RecoBertCollator(
            tokenizer,
            fields=self.fields,
            max_length=args.max_length,
            mlm_probability=args.mlm_probability,
            negative_probability=args.negative_probability,
            seed=args.seed,
        )

    def compute_loss(self, model, inputs, return_outputs: bool = False, num_items_in_batch=None):
        args: RecoBertConfig = self.args
        outputs = model(pair_batch=inputs)
        scores = tdm_score(outputs["title_embeddings"], outputs["description_embeddings"])
        labels = inputs["tdm_labels"]
        matching = tdm_loss(scores, labels)
        loss = args.tdm_weight * matching
        if args.mlm_weight > 0:
            loss = loss + args.mlm_weight * outputs["mlm_loss"]
        detached, matched = scores.detach(), labels > 0.5
        statistics = {
            "mlm_loss": outputs["mlm_loss"].detach(),
            "tdm_loss": matching.detach(),
            "tdm_accuracy": ((detached > 0.5) == matched).float().mean(),
        }
        if matched.any():
            statistics["tdm_score_matched"] = detached[matched].mean()
        if not matched.all():
            statistics["tdm_score_mismatched"] = detached[~matched].mean()
        self.record(statistics)
        return (loss, outputs) if return_outputs else loss

    def objective_card_section(self) -> str:
        return (
            "## RecoBERT objective\n\n"
            "`L = mlm_weight * L_MLM + tdm_weight * L_TDM`, `C_TDM = (1 + cos(F^t, F^d)) / 2` on the joint "
            "title-description encoding, with:\n\n" + json_block(self.args.loss_config())
        )
