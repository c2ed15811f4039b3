"""Encoding one field of a batch in groups of texts of similar length.

The collator pads each field of a batch to that field's longest text. With the random items an
in-batch metric loss needs, a third of a wine batch's tokens and nearly half of a Debian batch's
are padding (batches of 32 at the catalogs' own ``max_length``), and the encoder spends its work
on them all the same: on a CPU the cost of a pass is proportional to the padded tokens. Sorting
the texts by length and encoding them in a few groups, each cut to its own longest text, removes
most of that work without changing what the loss sees: the vectors are put back in batch order
and the mining batch stays whole. Mean pooling ignores padding, so every vector is the one the
whole-batch pass gives, up to rounding.
"""

from __future__ import annotations

import torch


def length_groups_on(device: torch.device, requested: int) -> int:
    """The groups a pass uses on ``device``: ``requested`` on a CPU, whose cost follows the padded
    tokens; one on an accelerator, where padding is nearly free and each group is another launch
    of every kernel and another attention shape (4 groups made an H200's MiniLM step 3x slower,
    benchmarks/RESULTS.md)."""
    return requested if device.type == "cpu" else 1


def split_by_length(attention_mask: torch.Tensor, groups: int) -> list[torch.Tensor]:
    """The batch's row indices sorted by token length and split into up to ``groups`` groups of
    near-equal size (never an empty one); one group in batch order when ``groups`` is 1."""
    if groups < 1:
        raise ValueError(f"groups must be >= 1; got {groups}.")
    rows = torch.arange(len(attention_mask), device=attention_mask.device)
    if groups == 1:
        return [rows]
    order = torch.argsort(attention_mask.sum(dim=1), stable=True)
    return [group for group in torch.tensor_split(order, groups) if len(group)]


def group_inputs(inputs: dict[str, torch.Tensor], rows: torch.Tensor) -> dict[str, torch.Tensor]:
    """``inputs``' tensors ([B, L] each) at ``rows``, cut after the last column any of them attends to.

    With right padding (BERT's) that is the group's longest text. A left-padded batch keeps its
    width: cutting its leading columns would move every token's position. A group of every row is
    the batch itself (``split_by_length`` keeps it in batch order, and the collator already pads a
    field to its longest text), returned as it is: no copy, and no device sync for the width.
    """
    if len(rows) == len(inputs["attention_mask"]):
        return dict(inputs)
    mask = inputs["attention_mask"][rows]
    attended = torch.nonzero(mask.any(dim=0))
    width = int(attended.max()) + 1 if len(attended) else mask.shape[1]
    return {name: tensor[rows, :width] for name, tensor in inputs.items()}


def in_batch_order(parts: list[torch.Tensor], groups: list[torch.Tensor]) -> torch.Tensor:
    """The per-group results ``parts`` (one row per text, in each group's order) joined and put
    back in batch order; a single group is already in batch order (``split_by_length``)."""
    if len(parts) == 1:
        return parts[0]
    return torch.cat(parts)[torch.argsort(torch.cat(groups))]
