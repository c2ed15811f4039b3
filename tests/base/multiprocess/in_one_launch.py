"""Run under ``accelerate launch``: several of this folder's scripts in one launch, each script's
``main`` in turn with its own arguments, on the same processes. Each launch spends about 20 s of a
2-core machine importing torch and transformers in every process before its first check runs;
one launch for eight checks pays that once (accelerate's own suite runs its checks the same way).

A check that sets a module's setting for itself restores it, so the next check sees the library's
own; the processes wait for each other between checks.

Usage: accelerate launch --config_file accelerate_configs/cpu.yaml THIS_FILE PLAN_JSON
PLAN_JSON: a list of [script file name in this folder, [its arguments]].
"""

from __future__ import annotations

import gc
import json
import runpy
import sys
from pathlib import Path

from accelerate import PartialState

from metricbert_trainer.base.distributed import process_group_closed_at_exit

FOLDER = Path(__file__).parent


def main(plan_json: str) -> None:
    state = PartialState(cpu=True)
    for script, arguments in json.loads(Path(plan_json).read_text(encoding="utf-8")):
        runpy.run_path(str(FOLDER / script))["main"](*arguments)
        gc.collect()  # what a check left behind (a mapped cache among it) is gone before the next
        state.wait_for_everyone()


if __name__ == "__main__":
    with process_group_closed_at_exit():
        main(*sys.argv[1:])
