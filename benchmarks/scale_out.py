"""Training throughput, peak memory and MFU of BERT-Large under each engine, side by side.

    python benchmarks/scale_out.py --engines single_gpu zero2 zero3 --num-processes 1

For every engine (an ``accelerate_configs/`` file) the script launches
``benchmarks/scale_out_worker.py`` with ``accelerate launch`` (same model, batch, length and
steps), then prints one markdown table with items per second, its ratio to the first engine,
peak GPU memory and model FLOPs utilisation, and writes every record to ``--output``.

Defaults are the issue's setting: BERT-Large built from its config, bf16, sequence length 256,
activation checkpointing on and off. ``--model-size tiny --mixed-precision no`` runs the whole
path on a CPU in seconds, to check the script where no GPU is lent.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).with_name("scale_out_worker.py")


def run_engine(engine: str, checkpointing: bool, arguments: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        output = Path(folder) / "record.json"
        command = [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--config_file",
            str(REPO_ROOT / "accelerate_configs" / f"{engine}.yaml"),
            "--num_processes",
            str(arguments.num_processes),
            "--mixed_precision",
            arguments.mixed_precision,
            str(WORKER),
            "--output",
            str(output),
            "--model-size",
            arguments.model_size,
            "--batch-size",
            str(arguments.batch_size),
            "--max-length",
            str(arguments.max_length),
            "--warmup-steps",
            str(arguments.warmup_steps),
            "--steps",
            str(arguments.steps),
        ]
        if checkpointing:
            command.append("--activation-checkpointing")
        if arguments.profile:
            command += [
                "--profile",
                str(
                    Path(arguments.profile) / f"{engine}-checkpointing-{'on' if checkpointing else 'off'}.txt"
                ),
            ]
        result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True)
        if result.returncode != 0:
            print(result.stdout[-3000:], result.stderr[-6000:], file=sys.stderr)
            raise SystemExit(f"{engine} failed (exit {result.returncode}).")
        record = json.loads(output.read_text())
    record["accelerate_config"] = f"accelerate_configs/{engine}.yaml"
    return record


def markdown(records: list[dict]) -> str:
    baseline = records[0]["items_per_second"]
    lines = [
        f"Device: {records[0]['device']}, {records[0]['processes']} process(es); model {records[0]['model_size']} "
        f"({records[0]['parameters'] / 1e6:.0f}M parameters), {records[0]['batch_size_per_process']} items "
        f"per process and step, sequence length {records[0]['max_length']}, bf16 {records[0]['bf16']}; "
        f"median of {records[0]['measured_steps']} steps.",
        "",
        "| accelerate config | engine | activation checkpointing | items/s | ratio to first row | peak memory (GiB) | MFU |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for record in records:
        mfu = "n/a" if record["mfu"] is None else f"{100 * record['mfu']:.1f}%"
        lines.append(
            f"| {record['accelerate_config']} | {record['engine']} | {'on' if record['activation_checkpointing'] else 'off'} "
            f"| {record['items_per_second']:.1f} | {record['items_per_second'] / baseline:.2f} "
            f"| {record['peak_memory_gib']:.1f} | {mfu} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", nargs="+", default=["single_gpu", "zero2", "zero3"])
    parser.add_argument("--checkpointing", nargs="+", choices=["on", "off"], default=["off", "on"])
    parser.add_argument("--num-processes", type=int, default=1)
    parser.add_argument("--mixed-precision", choices=["bf16", "no"], default="bf16")
    parser.add_argument("--model-size", choices=["large", "tiny"], default="large")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--warmup-steps", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--output", default="benchmarks/scale_out.json")
    parser.add_argument("--profile", default=None, help="Folder for each engine's torch.profiler table.")
    arguments = parser.parse_args(argv)
    records = [
        run_engine(engine, checkpointing == "on", arguments)
        for checkpointing in arguments.checkpointing
        for engine in arguments.engines
    ]
    Path(arguments.output).write_text(json.dumps(records, indent=2), encoding="utf-8")
    print(markdown(records))


if __name__ == "__main__":
    main()
