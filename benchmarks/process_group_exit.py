"""How often a two-process launch that finished its work is reported failed, with and without
closing the gloo group together at exit (``base.distributed.process_group_closed_at_exit``).

    python benchmarks/process_group_exit.py --launches 32

Each launch (``accelerate launch``, the shipped CPU config, two processes) joins a gloo group,
sums a tensor across both processes, and process 0 lingers a second before returning, as process 0
does when it writes a cache or a model card after the others are done. Left open, the group is torn
down by each process's interpreter at exit: process 1, exiting while process 0 still holds the group,
can abort in gloo's destructor (``terminate called without an active exception``), and the launcher
then kills process 0 and exits non-zero. ``closed`` runs the same work inside the context manager,
which waits for both processes and destroys the group before exiting. Prints, per way, how many
launches failed and how many of those printed gloo's abort; the ways take turns, launch by launch.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
WAYS = ("open", "closed")
ABORT = "terminate called without an active exception"


def finish_work(linger_seconds: float) -> None:
    """One launched process's work: a sum across the processes, then process 0 lingers."""
    import torch
    from accelerate import PartialState

    state = PartialState(cpu=True)
    total = torch.ones(4)
    torch.distributed.all_reduce(total)
    if state.is_main_process:
        time.sleep(linger_seconds)


def launch(way: str, linger_seconds: float) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(REPO_ROOT / "accelerate_configs" / "cpu.yaml"),
        "--num_processes",
        "2",
        __file__,
        "--as-process",
        way,
        "--linger",
        str(linger_seconds),
    ]
    environment = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=300)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--launches", type=int, default=32, help="Launches per way.")
    parser.add_argument("--linger", type=float, default=1.0, help="Seconds process 0 lingers after the sum.")
    parser.add_argument("--as-process", choices=WAYS, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.as_process == "closed":
        from metricbert_trainer.base.distributed import process_group_closed_at_exit

        with process_group_closed_at_exit():
            finish_work(arguments.linger)
        return
    if arguments.as_process == "open":
        finish_work(arguments.linger)
        return

    from versus_sentence_transformers import cpu_name

    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores, load average before: {os.getloadavg()[0]:.2f}")
    failed = {way: 0 for way in WAYS}
    aborted = {way: 0 for way in WAYS}
    for _ in range(arguments.launches):
        for way in WAYS:
            result = launch(way, arguments.linger)
            failed[way] += result.returncode != 0
            aborted[way] += ABORT in result.stderr
    print("| way | launches | reported failed | of which gloo's abort |\n|---|---:|---:|---:|")
    for way in WAYS:
        print(f"| {way} | {arguments.launches} | {failed[way]} | {aborted[way]} |")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
