"""Run under ``accelerate launch`` with two processes: lists each process computed for itself, and
that differ between them, come out as process 0's on both (``process_zero_copy``).

Usage: accelerate launch --config_file accelerate_configs/cpu.yaml THIS_FILE OUTPUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from accelerate import PartialState

from metricbert_trainer.base.distributed import process_zero_copy


def main(output_dir: str) -> None:
    state = PartialState(cpu=True)
    # Lists as two processes might find them: the same shape, a few entries apart.
    own = torch.arange(3000, dtype=torch.int64).reshape(500, 6)
    own[::97, 2] += 1000 * state.process_index
    agreed = process_zero_copy(own, state.device)
    path = Path(output_dir) / f"rank{state.process_index}.json"
    path.write_text(json.dumps({"own": own.tolist(), "agreed": agreed.tolist(), "dtype": str(agreed.dtype)}))
    state.wait_for_everyone()  # leave the gloo group together (see conditional_statistics.py)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
