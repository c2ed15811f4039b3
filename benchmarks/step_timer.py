"""``StepTimer``: the wall time of every optimizer step, shared by the training benchmarks.

The benchmarks run as scripts (``python benchmarks/X.py``, ``accelerate launch benchmarks/X.py``),
so their own folder is on ``sys.path`` and they import this module by its plain name.
"""

from __future__ import annotations

import time

import torch
from transformers import TrainerCallback


class StepTimer(TrainerCallback):
    """Wall time of every optimizer step, synchronised with the GPU at both ends (CUDA runs
    asynchronously, so an unsynchronised timer would measure the kernel launches only)."""

    def __init__(self) -> None:
        self.durations: list[float] = []
        self._started = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        _synchronise()
        self._started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        _synchronise()
        self.durations.append(time.perf_counter() - self._started)


def _synchronise() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
