"""Is this folder a model the library can use? One check, one line naming the file at fault.

transformers answers a damaged or foreign folder from deep inside its loaders: a half-written
``model.safetensors`` ends in a safetensors traceback that names no file, a folder without
tokenizer files suggests installing sentencepiece, a missing folder is looked up on the Hub and
blamed on the network, and a GPT-2 folder loads as an ``AutoModel`` and ranks a catalog. Every
loader of this package (training, ranking, tagging, resuming) runs ``check_model_folder`` first.

What a folder must hold: a ``config.json`` whose architecture is an encoder (a model type with a
masked-LM form in transformers that is neither a decoder nor an encoder-decoder: BERT, RoBERTa,
MiniLM, DeBERTa, ...), tokenizer files when a tokenizer is loaded from it, and safetensors weights
whose every file is complete. Names that are no local path are left to the Hub or its cache.
"""

from __future__ import annotations

import json
from pathlib import Path

from safetensors import SafetensorError, safe_open
from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

from metricbert_trainer.errors import UsageError

WEIGHTS_INDEX = "model.safetensors.index.json"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "vocab.json",
    "spiece.model",
    "sentencepiece.bpe.model",
)


def is_local(value: object) -> bool:
    """Whether ``value`` names a place on this machine rather than a Hub id or a plain setting.

    One rule for every caller: where a model is loaded from (a local folder is checked before
    transformers would try the Hub) and what a model card or the saved arguments must not publish.
    A Hub id has at most one ``/``, so a relative path with more is local even before it exists.
    """
    if not isinstance(value, (str, Path)) or not str(value):
        return False
    text = str(value)
    return text.startswith((".", "/", "~")) or text.count("/") > 1 or Path(text).expanduser().exists()


def check_model_folder(
    name_or_path: str | Path,
    *,
    what: str = "model",
    tokenizer: bool = True,
    weights: bool = True,
    local: bool = False,
) -> None:
    """Raises ``UsageError`` when the local folder ``name_or_path`` is not a model this library can
    use (``model_folder_problem``); Hub ids pass unchecked."""
    problem = model_folder_problem(name_or_path, what=what, tokenizer=tokenizer, weights=weights, local=local)
    if problem:
        raise UsageError(problem)


def model_folder_problem(
    name_or_path: str | Path,
    *,
    what: str = "model",
    tokenizer: bool = True,
    weights: bool = True,
    local: bool = False,
) -> str | None:
    """Why the local folder ``name_or_path`` is not a usable model, in one line naming the file;
    ``None`` when it is, or when it names no local path (``local``: it names one whatever it
    looks like). ``what`` names the folder's role in the message (``model_name_or_path``,
    ``checkpoint``)."""
    if not local and not is_local(name_or_path):
        return None
    folder = Path(name_or_path).expanduser()
    if not folder.exists():
        return f"{what} {name_or_path} does not exist"
    if not folder.is_dir():
        return f"{what} {name_or_path} is a file; name the model's folder"
    config_file = folder / "config.json"
    if not config_file.is_file():
        return f"{what} {name_or_path} is not a model folder (no config.json in it)"
    problem = architecture_problem(config_file)
    if problem is None and tokenizer and not any((folder / name).is_file() for name in TOKENIZER_FILES):
        problem = f"{what} {name_or_path} has no tokenizer files (none of {', '.join(TOKENIZER_FILES)})"
    if problem is None and weights:
        problem = weights_problem(folder)
    return problem


def architecture_problem(config_file: Path) -> str | None:
    """Why the model ``config_file`` describes is not an encoder this library supports."""
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        return f"{config_file} is not valid JSON ({error}); re-save or re-download the model"
    if not isinstance(config, dict) or not config.get("model_type"):
        return f"{config_file} names no model_type; it is not a transformers model configuration"
    model_type = config["model_type"]
    if (
        model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES
        or config.get("is_decoder")
        or config.get("is_encoder_decoder")
    ):
        architectures = ", ".join(config.get("architectures") or []) or "no architectures listed"
        return (
            f"{config_file} describes a {model_type} model ({architectures}), not an encoder this library "
            "supports: use a BERT-like encoder (bert, roberta, xlm-roberta, deberta-v2, mpnet, ...)"
        )
    return None


def weights_problem(folder: Path) -> str | None:
    """Why the safetensors weights of ``folder`` cannot be read: none there, or a file incomplete
    or damaged (its header is read, which also checks that the file covers every tensor)."""
    index = folder / WEIGHTS_INDEX
    if index.is_file():
        try:
            names = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as error:
            return f"{index} cannot be read ({error!r}); re-save or re-download the model"
        files = [folder / name for name in names]
    else:
        files = sorted(folder.glob("*.safetensors"))
    if not files:
        return (
            f"{folder} holds no model.safetensors (weights load from safetensors only, never from a pickle)"
        )
    for file in files:
        if not file.is_file():
            return f"{file} is missing ({WEIGHTS_INDEX} lists it); re-save or re-download the model"
        try:
            with safe_open(str(file), framework="pt"):
                pass
        except (SafetensorError, OSError) as error:
            return f"{file} is incomplete or damaged ({error}); re-save or re-download the model"
    return None
