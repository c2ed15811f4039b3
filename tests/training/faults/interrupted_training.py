"""A short MetricBERT training (tiny model, MLM and dropout on, two epochs of shuffled data) that
can be killed with SIGKILL or made to fail while saving, at a chosen step, and then resumed.

Usage: python THIS_FILE MODEL_PATH OUTPUT_DIR [--kill-after-step K | --kill-while-saving K |
       --fail-saving K] [--resume]

``--kill-after-step K`` sends SIGKILL to this process once step K is done (the OS kills it,
nothing is flushed); ``--kill-while-saving K`` does so after the model file of checkpoint K is
half-written; ``--fail-saving K`` makes that write raise ``OSError`` (a full disk) instead.
``--resume`` resumes from the newest checkpoint in OUTPUT_DIR. The step training starts from is
printed. safetensors' writer is replaced
for the save faults because the operating system offers no other way to stop a process at a
chosen byte of a chosen file.
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
from pathlib import Path

import transformers.modeling_utils
from transformers import AutoTokenizer, TrainerCallback

from metricbert_trainer.base.modeling import load_masked_lm
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.metricbert.config import MetricBertConfig
from metricbert_trainer.metricbert.trainer import MetricBertTrainer

WINES_CSV = Path(__file__).resolve().parents[3] / "data" / "wines" / "winemag-sample-5811.csv"
MAX_STEPS, SAVE_STEPS, ITEMS, BATCH = 8, 2, 24, 4  # 6 steps an epoch: resuming crosses an epoch


class ReportStart(TrainerCallback):
    """Prints the step training starts from (0, or the resumed checkpoint's)."""

    def on_train_begin(self, args, state, control, **kwargs):
        print(f"starting at step {state.global_step}", flush=True)


class KillAfterStep(TrainerCallback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


def break_checkpoint_writes(step: int, kill: bool) -> None:
    """Makes the model file of checkpoint ``step`` stop half-way: SIGKILL or a full disk."""
    write = transformers.modeling_utils.safe_save_file

    def faulty_write(tensors, filename, metadata=None):
        if f"checkpoint-{step}" not in str(filename):
            return write(tensors, filename, metadata=metadata)
        write(tensors, filename, metadata=metadata)
        with open(filename, "r+b") as handle:
            handle.truncate(os.path.getsize(filename) // 2)
        if kill:
            os.kill(os.getpid(), signal.SIGKILL)
        raise OSError(errno.ENOSPC, "No space left on device", str(filename))

    transformers.modeling_utils.safe_save_file = faulty_write


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model_path")
    parser.add_argument("output_dir")
    fault = parser.add_mutually_exclusive_group()
    fault.add_argument("--kill-after-step", type=int)
    fault.add_argument("--kill-while-saving", type=int)
    fault.add_argument("--fail-saving", type=int)
    parser.add_argument("--resume", action="store_true")
    options = parser.parse_args()

    args = MetricBertConfig(
        output_dir=options.output_dir,
        max_steps=MAX_STEPS,
        save_strategy="steps",
        save_steps=SAVE_STEPS,
        save_total_limit=2,
        per_device_train_batch_size=BATCH,
        learning_rate=1e-3,
        warmup_steps=2,
        mlm_weight=1.0,
        mlm_probability=0.15,
        # The MLM term without the rest of the recipe (MetricBertConfig's defaults): no warm-up, no teacher.
        mlm_head_warmup_steps=0,
        mlm_weight_ramp_steps=0,
        teacher_weight=0.0,
        batch_neighbourhood_size=0,
        length_groups=1,
        logging_steps=1,
        report_to="none",
        seed=3,
        use_cpu=True,
        cpu_bf16=False,
    )
    trainer = MetricBertTrainer(
        model=load_masked_lm(options.model_path),
        args=args,
        train_dataset=load_catalog(WINES_CSV).dataset.select(range(ITEMS)),
        processing_class=AutoTokenizer.from_pretrained(options.model_path),
    )
    trainer.add_callback(ReportStart())
    if options.kill_after_step is not None:
        trainer.add_callback(KillAfterStep(options.kill_after_step))
    if options.kill_while_saving is not None or options.fail_saving is not None:
        break_checkpoint_writes(
            options.kill_while_saving or options.fail_saving, kill=options.kill_while_saving is not None
        )
    trainer.train(resume_from_checkpoint="last" if options.resume else None)
    trainer.save_model(options.output_dir)


if __name__ == "__main__":
    main()
