"""Tagging held-out titles and scoring the tags: the NER evaluation in training and in the CLI.

Each title is tokenized from its words, as in training, and each word takes the label the model
gives its first word piece; words cut off by ``max_length`` are tagged ``O``. The predictions are
scored against the gold tags by ``metrics.tagging_metrics``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import datasets
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from metricbert_trainer.evaluation.encoding import inference_session
from metricbert_trainer.ner.collator import ENCODER_KEYS, encode_words
from metricbert_trainer.ner.metrics import tagging_metrics
from metricbert_trainer.ner.tagging import OUTSIDE


def predict_tags(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    titles: Sequence[Sequence[str]],
    *,
    batch_size: int = 64,
    max_length: int = 128,
) -> list[list[str]]:
    """The model's tag for every word of every title (titles given as lists of words)."""
    id2label = model.config.id2label
    predicted = []
    with inference_session(model) as device:
        for start in range(0, len(titles), batch_size):
            words = [list(title) for title in titles[start : start + batch_size]]
            encoded = encode_words(tokenizer, words, max_length=max_length)
            inputs = {name: encoded[name].to(device) for name in ENCODER_KEYS if name in encoded}
            best = model(**inputs).logits.argmax(dim=-1).cpu()
            for row, title in enumerate(words):
                tags = [OUTSIDE] * len(title)
                previous = None
                for position, word in enumerate(encoded.word_ids(row)):
                    if word is not None and word != previous:
                        tags[word] = id2label[int(best[row, position])]
                    previous = word
                predicted.append(tags)
    return predicted


@dataclass
class TaggingEvaluator:
    """``(model, tokenizer) -> {"precision", "recall", "f1", "exact_match", "token_accuracy"}`` on
    ``dataset``'s titles (columns ``tokens`` and ``tags``), in %.

    Given to a trainer as its evaluator, ``evaluate()`` logs them as ``eval_f1``, ... so
    ``metric_for_best_model: f1`` selects checkpoints on held-out entity F1.
    """

    dataset: datasets.Dataset
    batch_size: int = 64
    max_length: int = 128

    def __call__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> dict[str, float]:
        predicted = predict_tags(
            model, tokenizer, self.dataset["tokens"], batch_size=self.batch_size, max_length=self.max_length
        )
        return tagging_metrics(self.dataset["tags"], predicted)
