"""Run under ``accelerate launch`` with two processes: logged statistics that only some processes
recorded (a guide statistic, RecoBERT's matched score, nothing at all on one process) must be
averaged by name over the processes that have them, on every process, without a hang.

Usage: accelerate launch --config_file accelerate_configs/cpu.yaml THIS_FILE OUTPUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from accelerate import PartialState

from metricbert_trainer.base.distributed import mean_by_name_across_processes, process_group_closed_at_exit

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


if __name__ == "__main__":
    with process_group_closed_at_exit():
        main(*sys.argv[1:])
