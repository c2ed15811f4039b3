"""Runs a training script under ``accelerate launch --config_file accelerate_configs/fsdp.yaml`` with
FSDP2 really on, on CPU processes.

accelerate turns an FSDP config into FSDP only on accelerators; on a CPU it quietly runs DDP,
which would test nothing about sharding. torch's FSDP2 itself runs on CPU processes joined over
gloo, so this launcher sets the distributed type accelerate decided back to FSDP (in both of its
shared states) once it has built the FSDP plugin from the config. Everything after that is
accelerate's and transformers' own FSDP2 path: the plugin, ``prepare``, the checkpoint files and
their loading on resume.

Usage: accelerate launch --config_file accelerate_configs/fsdp.yaml THIS_FILE SCRIPT [SCRIPT_ARGS...]
"""

from __future__ import annotations

import runpy
import sys

from accelerate import state
from accelerate.utils import DistributedType

_build_state = state.AcceleratorState.__init__


def _build_state_with_fsdp_on_cpu(
    self,
    mixed_precision=None,
    cpu=False,
    dynamo_plugin=None,
    deepspeed_plugin=None,
    fsdp_plugin=None,
    *args,
    **kwargs,
):
    _build_state(self, mixed_precision, cpu, dynamo_plugin, deepspeed_plugin, fsdp_plugin, *args, **kwargs)
    if fsdp_plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
        state.PartialState._shared_state["distributed_type"] = DistributedType.FSDP
        self.distributed_type = DistributedType.FSDP
        self.fsdp_plugin = fsdp_plugin


if __name__ == "__main__":
    state.AcceleratorState.__init__ = _build_state_with_fsdp_on_cpu
    script, *arguments = sys.argv[1:]
    sys.argv = [script, *arguments]
    runpy.run_path(script, run_name="__main__")
