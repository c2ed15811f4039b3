"""Weight-space ensembling of the trained encoder with its starting point (WiSE-FT: Wortsman et
al., *Robust fine-tuning of zero-shot models*, CVPR 2022).

Training on one catalog moves the encoder towards that catalog's title/description pairing and
away from the general similarity it started with. Where the pairing is easy for the starting model
(long, distinctive descriptions), the move is mostly loss; where it is not, it is the gain
(docs/quality.md). Averaging each encoder weight between its starting and its trained value keeps
most of the gain of the second kind of catalog and cancels most of the loss of the first, without
a guard term that holds back the whole of training.

Only the encoder is blended. The MLM head is left as trained: for a model shipped without one its
starting state is a fresh initialisation, and no ranking reads it.
"""

from __future__ import annotations

import logging

import torch
from transformers import TrainerCallback

from metricbert_trainer.base.modeling import is_partitioned

logger = logging.getLogger(__name__)


@torch.no_grad()
def blend_with_start(encoder: torch.nn.Module, start: torch.nn.Module, trained_share: float) -> int:
    """Sets each parameter of ``encoder`` to ``trained_share * trained + (1 - trained_share) * start``
    in place, and returns how many parameters it changed.

    ``start`` is a whole copy with the same parameter names (``modeling.whole_copy`` of the encoder
    before training). ``encoder`` may be plain or replicated (one process, DDP: every process
    blends its identical copy), partitioned by DeepSpeed ZeRO-3 (gathered, blended on the first
    process, re-partitioned) or sharded by FSDP2 (each process blends its own shard).
    """
    if not 0.0 <= trained_share <= 1.0:
        raise ValueError(f"trained_share must be in [0, 1]; got {trained_share}.")
    starting = dict(start.named_parameters())
    named = list(encoder.named_parameters())
    missing = sorted({name for name, _ in named} - set(starting))
    if missing:
        raise ValueError(
            f"The starting encoder lacks parameters {missing[:5]}: it is not a copy of this encoder."
        )
    parameters = [parameter for _, parameter in named]
    if is_partitioned(encoder):
        import deepspeed

        with deepspeed.zero.GatheredParameters(parameters, modifier_rank=0):
            if torch.distributed.get_rank() == 0:
                _blend(named, starting, trained_share)
    else:
        _blend(named, starting, trained_share)
    return len(named)


def _blend(
    named_parameters: list[tuple[str, torch.nn.Parameter]],
    starting: dict[str, torch.nn.Parameter],
    trained_share: float,
) -> None:
    from torch.distributed.tensor import DTensor, distribute_tensor

    for name, parameter in named_parameters:
        start = starting[name].detach().to(device=parameter.device, dtype=parameter.dtype)
        if isinstance(parameter.data, DTensor):
            start = distribute_tensor(start, parameter.device_mesh, parameter.placements)
        parameter.data.lerp_(start, 1.0 - trained_share)


class StartBlendCallback(TrainerCallback):
    """Blends the trained encoder with its start once training ends (``trained_weight_share`` < 1),
    so every checkpoint holds the trained weights and the saved model the blend. ``start`` is the
    frozen copy of the encoder taken before the first step."""

    def __init__(self, start: torch.nn.Module, trained_share: float) -> None:
        self.start = start
        self.trained_share = trained_share

    def on_train_end(self, args, state, control, model=None, **kwargs) -> None:
        blend_with_start(model.base_model, self.start, self.trained_share)
        logger.info(
            "Final encoder: %.2f x trained + %.2f x starting weights (trained_weight_share, WiSE-FT).",
            self.trained_share,
            1 - self.trained_share,
        )
