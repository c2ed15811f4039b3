"""Nothing a user's files contain runs as code: weights load from safetensors only, a checkpoint's
own code runs only when ``trust_remote_code`` says so, and no pickle is read unless an explicit
option allows it. (The Hub token is covered in test_publishing.py.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from transformers import BertForMaskedLM

from metricbert_trainer.base.modeling import load_masked_lm
from metricbert_trainer.errors import UsageError
from metricbert_trainer.evaluation.scorers import load_encoder
from metricbert_trainer.metricbert.config import MetricBertConfig
from metricbert_trainer.publishing.consolidate import consolidate_zero_checkpoint
from metricbert_trainer.scripts.arguments import DataArguments, ModelArguments, parse_recipe_args

PACKAGE = Path(__file__).resolve().parents[2] / "metricbert_trainer"


@pytest.fixture
def pickled_model(tmp_path, tiny_model_path, tokenizer) -> Path:
    """The tiny BERT saved the old way, as pytorch_model.bin (a pickle; transformers 5 no longer
    writes one itself)."""
    model = load_masked_lm(tiny_model_path)
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    model.config.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    assert (tmp_path / "pytorch_model.bin").is_file() and not (tmp_path / "model.safetensors").exists()
    return tmp_path


def test_pickled_weights_are_refused(pickled_model):
    refusal = "holds no model.safetensors \\(weights load from safetensors only, never from a pickle\\)"
    with pytest.raises(UsageError, match=refusal):
        load_masked_lm(str(pickled_model))
    with pytest.raises(UsageError, match=refusal):
        load_encoder(pickled_model, device="cpu")


def test_checkpoint_code_runs_only_when_trusted(tiny_model_path, tmp_path):
    folder = tmp_path / "custom"
    folder.mkdir()
    for file in Path(tiny_model_path).iterdir():
        (folder / file.name).write_bytes(file.read_bytes())
    marker = tmp_path / "code-ran"
    (folder / "modeling_custom.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).touch()\n"
        "from transformers import BertForMaskedLM\nclass CustomForMaskedLM(BertForMaskedLM):\n    pass\n",
        encoding="utf-8",
    )
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config["auto_map"] = {"AutoModelForMaskedLM": "modeling_custom.CustomForMaskedLM"}
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")

    model_args, _, _ = parse_recipe_args(
        (ModelArguments, DataArguments, MetricBertConfig),
        ["--catalog", "items.csv", "--output_dir", str(tmp_path), "--model_name_or_path", str(folder)],
    )
    assert model_args.trust_remote_code is False
    # Untrusted, the folder's code is not imported: transformers' own class for its model type loads.
    untrusted = load_masked_lm(str(folder), trust_remote_code=model_args.trust_remote_code)
    assert type(untrusted) is BertForMaskedLM and not marker.exists()
    assert type(load_masked_lm(str(folder), trust_remote_code=True)).__name__ == "CustomForMaskedLM"
    assert marker.exists()


def test_consolidating_deepspeed_pickles_needs_permission(tmp_path):
    (tmp_path / "latest").write_text("global_step1", encoding="utf-8")
    with pytest.raises(PermissionError, match="allow-pickle"):
        consolidate_zero_checkpoint(tmp_path, tmp_path / "out")


def test_the_package_reads_no_pickle_on_its_own():
    """Every deserialisation in the package is of data: no pickle module, no ``torch.load``
    without ``weights_only=True``, no ``allow_pickle=True``, no ``eval``."""
    unsafe = re.compile(
        r"\bimport pickle\b|\bpickle\.load|allow_pickle=True|(?<![\w.])eval\(|torch\.load\((?![^)]*weights_only=True)"
    )
    findings = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if unsafe.search(line)
    ]
    assert findings == []
