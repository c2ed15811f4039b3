"""The tagger: an ``AutoModelForTokenClassification`` with the multi-task forward pass.

``model(tagging_batch=batch)`` runs the title through the tagger once, for the token
classification loss and, from the same last hidden layer, the title's mean-pooled vector ``t_i``;
the descriptions go through the same encoder on their own and are mean-pooled into ``d``. Only
training calls it: at inference the model is a plain token classifier, which
``pipeline("token-classification")`` loads from the saved folder.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import AutoModelForTokenClassification, PreTrainedModel

from metricbert_trainer.base.collator import field_inputs
from metricbert_trainer.base.model_folders import check_model_folder
from metricbert_trainer.base.modeling import add_forward_pass, resolve_model_name
from metricbert_trainer.base.pooling import mean_pool
from metricbert_trainer.ner.collator import ENCODER_KEYS


def load_tagger(
    name_or_path: str, labels: Sequence[str], *, trust_remote_code: bool = False
) -> PreTrainedModel:
    """An ``AutoModelForTokenClassification`` with ``labels`` (``id2label``/``label2id``), from any
    encoder checkpoint (the classifier is new unless the checkpoint is a tagger of those labels)."""
    path = resolve_model_name(name_or_path)
    check_model_folder(path, tokenizer=False)
    return AutoModelForTokenClassification.from_pretrained(
        path,
        num_labels=len(labels),
        id2label=dict(enumerate(labels)),
        label2id={label: index for index, label in enumerate(labels)},
        trust_remote_code=trust_remote_code,
        use_safetensors=True,
    )


def enable_tagging_forward(model: PreTrainedModel, description_field: str = "description") -> PreTrainedModel:
    """Lets ``model(tagging_batch=batch)`` return ``{"tagging_loss", "logits", "title_embeddings"}``
    and, when the batch holds descriptions, ``"description_embeddings"``."""

    def tagging_pass(model, plain_forward, head, batch) -> dict[str, torch.Tensor]:
        title = {name: batch[name] for name in ENCODER_KEYS if name in batch}
        outputs = plain_forward(**title, labels=batch["labels"], output_hidden_states=True)
        result = {
            "tagging_loss": outputs.loss,
            "logits": outputs.logits,
            "title_embeddings": mean_pool(outputs.hidden_states[-1], title["attention_mask"]),
        }
        description = field_inputs(batch, description_field)
        if description:
            hidden = model.base_model(**description).last_hidden_state
            result["description_embeddings"] = mean_pool(hidden, description["attention_mask"])
        return result

    return add_forward_pass(model, "tagging_batch", tagging_pass)
