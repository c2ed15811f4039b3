"""Run under ``accelerate launch`` with two processes: logged statistics that only some processes
recorded (a guide statistic, RecoBERT's matched score, nothing at all on one process) must be
averaged by name over the processes that have them, on every process, without a hang.

Usage: accelerate launch --config_file accelerate_configs/cpu.yaml THIS_FILE OUTPUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch.distributed as dist
from accelerate import PartialState

from metricbert_trainer.base.distributed import mean_by_name_across_processes

# What each process recorded at three successive logs.
RECORDED = {
    0: [
        {"triplet_loss": 1.0, "guide_negative_closer_rate": 0.5},
        {"triplet_loss": 2.0},
        {},
    ],
    1: [
        {"triplet_loss": 3.0, "matched_score": 0.9, "embedding_spread": 0.25},
        {},
        {},
    ],
}


def main(output_dir: str) -> None:
    state = PartialState(cpu=True)
    results = [mean_by_name_across_processes(local, "cpu") for local in RECORDED[state.process_index]]
    path = Path(output_dir) / f"rank{state.process_index}.json"
    path.write_text(json.dumps(results), encoding="utf-8")
    # Both processes leave the gloo group together: a process that exits while its peer still
    # holds the group open can abort in gloo's destructor ("terminate called without an active
    # exception"), which failed this test now and then.
    state.wait_for_everyone()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
