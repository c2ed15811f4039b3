"""One word-embedding lookup for all the encoder calls of a training pass.

A MetricBERT pass calls the encoder once per field and length group (and once more per group
for the unmasked pass): 8 to 16 calls a step. Each call's word-embedding backward writes a dense
gradient the size of the whole vocabulary table (30,522 x 384 floats on MiniLM) and adds it to
the weight's gradient; on a CPU those fills and adds took a tenth of a step without MLM. Inside
``shared_word_embedding_lookup`` the table's rows for the batch's tokens are looked up once, each
call reads its embeddings from those rows, and the dense gradient is written once a step.

Everything else the embedding layer does (positions, token types, layer norm) stays the model's
own, so the vectors and gradients are those of the separate lookups up to summation order.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import torch
from torch.distributed.tensor import DTensor
from transformers import PreTrainedModel

from metricbert_trainer.base.modeling import is_partitioned


@contextlib.contextmanager
def shared_word_embedding_lookup(model: PreTrainedModel, token_ids: Iterable[torch.Tensor]) -> Iterator[None]:
    """Within the block, the model's word embeddings of any token in ``token_ids`` (every token
    the block's encoder calls will read) come from one lookup.

    It acts only where it saves work: when gradients are being recorded for a trainable table
    whose parameters are whole on this process. ZeRO-3 and FSDP2 shards are gathered per call of
    the module that owns them, and FSDP2 gathers the table only for a call of its group's outer
    module (the embeddings), not of the table itself; under either the calls look the table up
    as the model does.
    """
    table = model.get_input_embeddings()
    if (
        not torch.is_grad_enabled()
        or not isinstance(table, torch.nn.Embedding)
        or not table.weight.requires_grad
        or is_partitioned(model)
        or isinstance(table.weight, DTensor)
    ):
        yield
        return
    vocabulary = torch.unique(torch.cat([ids.flatten() for ids in token_ids]))
    rows = table(vocabulary)

    def from_rows(module, inputs, output):
        # An embedding of the rows, not ``rows[positions]``: indexing's backward accumulates
        # with threads in no fixed order on a CPU (two runs of one seed drifted apart under
        # Adam), the embedding backward sums in a fixed order and is faster.
        return torch.nn.functional.embedding(torch.searchsorted(vocabulary, inputs[0]), rows)

    handle = table.register_forward_hook(from_rows)
    try:
        yield
    finally:
        handle.remove()
