"""Turning a DeepSpeed ZeRO checkpoint back into an ordinary transformers checkpoint.

A ZeRO checkpoint keeps the fp32 master weights partitioned across one file per process
(``checkpoint-N/global_stepN/``). The ``model.safetensors`` saved beside it is whatever the run
saved at that step: the 16-bit weights under bf16 (``zero3_save_16bit_model``), or nothing usable
when that option was off. ``consolidate_zero_checkpoint`` merges the partitions into the full
fp32 weights and writes a folder that ``AutoModel``, ``AutoModelForMaskedLM`` and
sentence-transformers load like any other (``saved_layout``: the encoder on top, the masked-LM
model in ``masked_lm/``), with the checkpoint's config, tokenizer, model card and
sentence-transformers files.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from transformers import AutoConfig, AutoModelForMaskedLM, AutoTokenizer

from metricbert_trainer.base.modeling import masked_lm_location
from metricbert_trainer.publishing.saved_layout import split_encoder_and_masked_lm

logger = logging.getLogger(__name__)

# What the trainer writes beside the weights of every save (sentence-transformers files, card,
# plot); carried over so the consolidated folder publishes like any other.
PUBLISHING_FILES = (
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "1_Pooling/config.json",
    "README.md",
    "loss_terms.png",
)


def consolidate_zero_checkpoint(
    checkpoint_dir: str | Path, output_dir: str | Path, *, tag: str | None = None, allow_pickle: bool = False
) -> Path:
    """Writes the full fp32 model of a ZeRO (stage 1-3) checkpoint to ``output_dir``.

    ``checkpoint_dir`` is a Trainer checkpoint (``checkpoint-N``, holding ``latest`` and
    ``global_stepN/``); ``tag`` picks another step folder than ``latest`` names. DeepSpeed stores
    the partitions as pickles, and unpickling a file can run any code it names, so
    ``allow_pickle`` must say that the checkpoint comes from a trusted run.
    """
    checkpoint_dir, output_dir = Path(checkpoint_dir), Path(output_dir)
    # What the folder is comes first: asking to trust the pickles of a folder that is missing, or
    # holds no DeepSpeed checkpoint, would send the user to the wrong fix.
    if not checkpoint_dir.is_dir():
        raise FileNotFoundError(
            f"{checkpoint_dir} is not a folder"
            + ("" if checkpoint_dir.exists() else " (it does not exist)")
            + ": name a Trainer checkpoint of a DeepSpeed ZeRO run (checkpoint-N)."
        )
    step_folder = checkpoint_dir / tag if tag is not None else None
    if tag is None and not (checkpoint_dir / "latest").is_file():
        raise FileNotFoundError(
            f"{checkpoint_dir} is not a DeepSpeed checkpoint: it has no 'latest' file naming its "
            "global_step folder (name one with --tag, or tag= in Python)."
        )
    if step_folder is not None and not step_folder.is_dir():
        raise FileNotFoundError(f"{checkpoint_dir} has no step folder {tag!r} (--tag).")
    if not allow_pickle:
        raise PermissionError(
            f"{checkpoint_dir}: DeepSpeed's partition files are pickles, and reading a pickle can run any code. "
            "Set allow_pickle (--allow-pickle) if the checkpoint comes from a run you trust."
        )
    try:
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    except ImportError as error:
        raise ImportError(
            "Consolidating a ZeRO checkpoint needs DeepSpeed: pip install deepspeed."
        ) from error
    state_dict = get_fp32_state_dict_from_zero_checkpoint(str(checkpoint_dir), tag=tag)
    model = AutoModelForMaskedLM.from_config(
        AutoConfig.from_pretrained(masked_lm_location(str(checkpoint_dir)))
    )
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    # Tied weights (the MLM decoder shares the word embeddings) are stored once.
    tied = set(model.all_tied_weights_keys)
    missing = [name for name in missing if name not in tied]
    if missing or unexpected:
        raise ValueError(
            f"The ZeRO checkpoint {checkpoint_dir} does not match its config: missing {missing}, "
            f"unexpected {unexpected}."
        )
    model.tie_weights()
    model.save_pretrained(output_dir)
    split_encoder_and_masked_lm(output_dir)
    try:
        AutoTokenizer.from_pretrained(checkpoint_dir).save_pretrained(output_dir)
    except (OSError, ValueError):
        logger.warning("%s holds no tokenizer; copy one into %s before using it.", checkpoint_dir, output_dir)
    for name in PUBLISHING_FILES:
        source = checkpoint_dir / name
        if source.is_file():
            (output_dir / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, output_dir / name)
    logger.info("Wrote the consolidated fp32 model of %s to %s.", checkpoint_dir, output_dir)
    return output_dir
