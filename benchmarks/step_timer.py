"""``StepTimer``: the wall time of every optimizer step, shared by the training benchmarks.

The benchmarks run as scripts (``python benchmarks/X.py``, ``accelerate launch benchmarks/X.py``),
so their own folder is on ``sys.path`` and they import this module by its plain name.
"""

from __future__ import annotations

import time

import torch
from torch.autograd.profiler_util import EventList
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


class StepProfiler(TrainerCallback):
    """``torch.profiler`` over ``count`` optimizer steps starting at step ``first``, written as
    tables (by device time, by host time, by host time per input shape) to ``path``: where a step's time goes, how much
    of it the GPU spends idle waiting for the host (its kernels' total beside the wall time), and
    how many operators the host dispatched a step (a CPU can count those too).

    The count is also given without the gradient clipping and the optimizer's step: on a CPU their
    multi-tensor operators fall back to a loop over the model's parameter tensors (about 1,300
    operators a step for MiniLM, the same for every trainer), where a GPU runs a few fused
    kernels, so a CPU's count without them is the one that predicts a host-bound GPU step. To tell
    those operators apart a CPU's profile records Python frames (``with_stack``), which slows its
    host; a GPU's does not, so that its wall time and device-busy share stay those of plain steps."""

    def __init__(self, path: str, first: int, count: int = 3) -> None:
        self.path, self.first, self.count = path, first, count
        self._profiler = None
        self._started = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.first and self._profiler is None:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            _synchronise()
            self._profiler = torch.profiler.profile(
                activities=activities, with_stack=not torch.cuda.is_available(), record_shapes=True
            )
            self._profiler.__enter__()
            self._started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if self._profiler is None or state.global_step != self.first + self.count:
            return
        _synchronise()
        wall = time.perf_counter() - self._started
        self._profiler.__exit__(None, None, None)
        events = self._profiler.events()
        # The tables leave out the Python frames, which only a CPU's profile records (to place the
        # operators); a GPU's has none, and older torch (the lent machines' 2.11) lacks the attribute.
        frames = (
            set()
            if torch.cuda.is_available()
            else {event.key for event in events if event.is_python_function}
        )
        averages = EventList(
            [average for average in self._profiler.key_averages() if average.key not in frames],
            use_device="cuda" if torch.cuda.is_available() else None,
        )
        # Operators dispatched on the host (nested ones included): what a host-bound GPU step pays for.
        operators = sum(event.count for event in averages if event.key.startswith("aten::"))
        without_update = (
            f"{(operators - update_operator_calls(events)) / self.count:.0f} without the gradient clipping and optimizer step"
            if not torch.cuda.is_available()
            else "the update's among them (fused kernels on a GPU)"
        )
        # The kernels themselves (an operator's row repeats its kernels' time, as the table's total skips it).
        device_busy = (
            sum(
                event.self_device_time_total
                for event in averages
                if event.device_type == torch.autograd.DeviceType.CUDA and not event.is_user_annotation
            )
            / 1e6
        )
        with open(self.path, "w", encoding="utf-8") as handle:
            handle.write(
                f"{self.count} steps: wall {wall:.3f} s, device kernels {device_busy:.3f} s "
                f"({100 * device_busy / wall:.0f}% busy), {operators / self.count:.0f} ATen operator calls a step, "
                f"{without_update}\n\n"
            )
            for key in ("self_device_time_total", "self_cpu_time_total", "count"):
                handle.write(
                    f"sorted by {key}\n{averages.table(sort_by=key, row_limit=25, max_name_column_width=60)}\n"
                )
            # The same operator on tensors of different shapes (a vocabulary-sized table, an activation) apart.
            by_shape = EventList(
                [
                    average
                    for average in self._profiler.key_averages(group_by_input_shape=True)
                    if average.key not in frames
                ],
                use_device="cuda" if torch.cuda.is_available() else None,
            )
            handle.write(
                "sorted by self_cpu_time_total, by input shape\n"
                f"{by_shape.table(sort_by='self_cpu_time_total', row_limit=25, max_name_column_width=60)}\n"
            )
            # Every operator's calls a step, so two rows' files can be compared line by line.
            handle.write("ATen operator calls a step, by operator\n")
            counted = sorted(
                (event for event in averages if event.key.startswith("aten::")), key=lambda e: -e.count
            )
            for event in counted:
                handle.write(f"{event.count / self.count:10.1f}  {event.key}\n")
        self._profiler = None


# The Python frames of the update after the backward pass: gradient clipping and the optimizer's step.
UPDATE_FRAMES = ("torch/nn/utils/clip_grad.py", "torch/optim/")


def update_operator_calls(events) -> int:
    """How many of a profile's ATen operator calls the gradient clipping and the optimizer's step
    dispatched (the profile recorded with ``with_stack``, whose Python frames place them)."""
    return sum(1 for event in events if event.name.startswith("aten::") and _inside_the_update(event))


def _inside_the_update(event) -> bool:
    """Whether a profiled operator was dispatched by the gradient clipping or the optimizer's step."""
    parent = event.cpu_parent
    while parent is not None:
        if any(frame in parent.name for frame in UPDATE_FRAMES):
            return True
        parent = parent.cpu_parent
    return False
