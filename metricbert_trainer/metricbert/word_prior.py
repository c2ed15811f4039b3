"""The catalog's word prior: where an untrained MLM head's output bias starts.

Before a head reads anything from the hidden states, the best it can predict for a masked word
piece is how often each word piece occurs in the catalog. A fresh head starts from a uniform
guess (MLM loss ``ln(30,522) ≈ 10.3`` and above), and the MLM-head warm-up spent its steps and its
encoded batches learning that prior through the output bias, which AdamW moves by about one
learning rate a step while log-frequencies span more than ten nats. Counted directly from the
tokenized catalog, the prior costs a second or two and no encoding: on both development catalogs
it takes a fresh head's MLM loss from about 10.9 to 7.1-7.6 before its first step, and the warm-up's
steps are then left with what needs the hidden states (benchmarks/RESULTS.md, "The MLM-head
warm-up").
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from metricbert_trainer.data.token_rows import TokenRows

# Added to every word piece's count, so that one the catalog never uses keeps a finite logit.
SMOOTHING = 0.1


def word_piece_log_prior(tokenizer: PreTrainedTokenizerBase, columns: Iterable[TokenRows]) -> torch.Tensor:
    """``[vocabulary]`` log-frequencies of the word pieces in ``columns`` (each field's texts as the
    collators truncate them), special tokens left out (MLM never masks them), centred on their
    mean (a softmax ignores a shift)."""
    counts = np.zeros(len(tokenizer), dtype=np.float64)
    for rows in columns:
        counts += np.bincount(rows.ids, minlength=len(counts))
    counts[list(tokenizer.all_special_ids)] = 0
    prior = torch.from_numpy(counts)
    log_prior = torch.log((prior + SMOOTHING) / (prior.sum() + SMOOTHING * len(prior)))
    return (log_prior - log_prior.mean()).float()


def set_output_bias(model: PreTrainedModel, log_prior: torch.Tensor) -> None:
    """Writes ``log_prior`` into the MLM head's output bias (the decoder's, which BERT and RoBERTa
    tie to the head's own ``bias``)."""
    bias = model.get_output_embeddings().bias
    if bias is None or bias.shape != log_prior.shape:
        raise ValueError(
            f"{type(model).__name__}'s output layer has no bias of the vocabulary's size ({len(log_prior)}): "
            "the word prior cannot be set; use mlm_head_warmup_word_prior: false."
        )
    with torch.no_grad():
        bias.copy_(log_prior.to(bias.device, bias.dtype))
