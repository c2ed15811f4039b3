"""The layout of a saved folder: the encoder on top, the whole masked-LM model in ``masked_lm/``.

Training saves an ``AutoModelForMaskedLM``, but people load a published folder with
``AutoModel`` or ``SentenceTransformer``, which build the encoder alone (BERT's with a pooler).
Read from a masked-LM checkpoint, both print transformers' load report (the MLM head
unexpected, the pooler missing) although nothing is wrong. So the folder keeps what they load
at the top, the encoder's own checkpoint, and the masked-LM checkpoint (encoder and trained MLM
head) in ``masked_lm/``, where ``AutoModelForMaskedLM.from_pretrained(folder, subfolder="masked_lm")``,
``load_masked_lm(folder)`` and resuming find it. The encoder is written twice; the price is the
encoder's size on disk, and in exchange every loader reads a file that matches its model.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModel

from metricbert_trainer.base.modeling import MASKED_LM_FOLDER, whole_model_loading

# What ``save_pretrained`` writes for the model itself (not the tokenizer or our own files).
_MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json")
# Weights the encoder has and the masked-LM model lacks (BERT's pooler) are initialised from
# this seed, so that saving the same weights twice writes the same files.
_NEW_WEIGHTS_SEED = 0


def has_masked_lm_checkpoint(folder: str | Path) -> bool:
    """Whether ``folder`` holds a masked-LM checkpoint at its top, as ``save_pretrained`` writes it."""
    folder = Path(folder)
    return (folder / "config.json").is_file() and any(
        (folder / name).is_file() for name in ("model.safetensors", "model.safetensors.index.json")
    )


def split_encoder_and_masked_lm(folder: str | Path, start: str | Path | None = None) -> None:
    """Turns a folder where ``save_pretrained`` wrote a masked-LM model into the layout above:
    its model files move to ``masked_lm/`` and the encoder is written at the top.

    The encoder's weights that the masked-LM model lacks (BERT's pooler, which mean pooling never
    trains) are the ``start`` folder's own when it has them, so a user reading ``pooler_output``
    gets the layer the starting model shipped, not one drawn at random on save."""
    folder = Path(folder)
    masked_lm = folder / MASKED_LM_FOLDER
    if masked_lm.exists():
        shutil.rmtree(masked_lm)
    masked_lm.mkdir()
    for name in _model_files(folder):
        (folder / name).rename(masked_lm / name)
    # Written whole by this process even in a ZeRO-3 run, and without touching the training's random state.
    with whole_model_loading(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(_NEW_WEIGHTS_SEED)
        encoder = AutoModel.from_config(AutoConfig.from_pretrained(masked_lm))
    prefix = f"{encoder.base_model_prefix}."
    weights = {name.removeprefix(prefix): tensor for name, tensor in _read_weights(masked_lm).items()}
    if not weights.keys() & encoder.state_dict().keys():
        raise ValueError(f"{masked_lm} holds none of {type(encoder).__name__}'s weights.")
    missing = encoder.state_dict().keys() - weights.keys()
    if start is not None and missing and Path(start).is_dir() and Path(start).resolve() != folder.resolve():
        kept = {name.removeprefix(prefix): tensor for name, tensor in _read_weights(Path(start)).items()}
        weights |= {name: tensor for name, tensor in kept.items() if name in missing}
    encoder.load_state_dict(weights, strict=False)
    encoder.config.architectures = [type(encoder).__name__]
    encoder.save_pretrained(folder)


def copy_masked_lm(source: str | Path, destination: str | Path) -> None:
    """Copies ``source``'s ``masked_lm/`` into ``destination`` (a push from a checkpoint)."""
    subfolder = Path(source) / MASKED_LM_FOLDER
    if subfolder.is_dir():
        shutil.copytree(subfolder, Path(destination) / MASKED_LM_FOLDER, dirs_exist_ok=True)


def _model_files(folder: Path) -> list[str]:
    names = [name for name in _MODEL_FILES if (folder / name).is_file()]
    return names + sorted(path.name for path in folder.glob("model-*-of-*.safetensors"))


def _read_weights(folder: Path) -> dict[str, torch.Tensor]:
    weights: dict[str, torch.Tensor] = {}
    for path in sorted(folder.glob("model*.safetensors")):
        weights.update(load_file(path))
    return weights
