"""Damaged, foreign or missing model folders are refused in one line naming the file, by every
loader: the recipes (a model and a checkpoint to resume), ``metricbert`` ranking commands and
``ner-evaluate`` (issue #38, family 3). Real folders, really damaged."""

from __future__ import annotations

import shutil

import pytest
from conftest import QUICK_RUN, flags
from transformers import GPT2Config, GPT2LMHeadModel

from metricbert_trainer.base.model_folders import is_local
from metricbert_trainer.cli import main as metricbert
from metricbert_trainer.errors import UsageError
from metricbert_trainer.scripts.train import main as train_recipe


def _half_written_copy(source: str, destination) -> None:
    shutil.copytree(source, destination)
    weights = destination / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])


def _recipe(model: str, files, output_dir, **options) -> list[str]:
    return flags(
        model_name_or_path=model,
        catalog=files / "wines.csv",
        annotations="",
        output_dir=output_dir,
        mlm_head_warmup_steps=0,
        report_to="none",
        disable_tqdm="true",
        **{**QUICK_RUN, "max_train_items": 32, "max_steps": 2, **options},
    )


def _ranking_refusal(capsys, files, model) -> str:
    arguments = ["recommend", "--model", str(model), "--catalog", str(files / "wines.csv"), "--item", "0"]
    assert metricbert(arguments) == 1
    return capsys.readouterr().err.strip()


def test_a_half_written_model_is_named_by_every_loader(files, tiny_model_path, tmp_path, capsys):
    damaged = tmp_path / "damaged"
    _half_written_copy(tiny_model_path, damaged)
    message = _ranking_refusal(capsys, files, damaged)
    assert message.startswith(
        f"metricbert recommend: error: {damaged / 'model.safetensors'} is incomplete or damaged"
    )
    assert len(message.splitlines()) == 1
    with pytest.raises(UsageError, match=f"{damaged / 'model.safetensors'} is incomplete or damaged"):
        train_recipe(_recipe(str(damaged), files, tmp_path / "run"))


def test_a_half_written_checkpoint_is_refused_before_resuming(files, tiny_model_path, tmp_path):
    output_dir = tmp_path / "run"
    train_recipe(_recipe(tiny_model_path, files, output_dir, save_strategy="steps", save_steps=1))
    checkpoint = output_dir / "checkpoint-2"
    weights = checkpoint / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    for resume in (str(checkpoint), "last"):
        with pytest.raises(
            UsageError, match=f"checkpoint .*{weights} is incomplete or damaged|{weights} is incomplete"
        ):
            train_recipe(
                _recipe(tiny_model_path, files, output_dir, resume_from_checkpoint=resume, max_steps=3)
            )


def test_a_decoder_or_a_folder_that_is_no_model_is_refused(files, tokenizer, tmp_path, capsys):
    gpt2 = tmp_path / "gpt2"
    GPT2LMHeadModel(
        GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=tokenizer.vocab_size)
    ).save_pretrained(gpt2)
    tokenizer.save_pretrained(gpt2)
    message = _ranking_refusal(capsys, files, gpt2)
    assert f"{gpt2 / 'config.json'} describes a gpt2 model (GPT2LMHeadModel), not an encoder" in message
    message = _ranking_refusal(capsys, files, files)  # the data folder
    assert f"model {files} is not a model folder (no config.json in it)" in message


def test_missing_pieces_are_named_not_blamed_on_the_network(files, tiny_model_path, tmp_path, capsys):
    weights_only = tmp_path / "weights-only"
    weights_only.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(f"{tiny_model_path}/{name}", weights_only / name)
    message = _ranking_refusal(capsys, files, weights_only)
    assert f"model {weights_only} has no tokenizer files" in message and "install" not in message
    missing = tmp_path / "missing"
    assert metricbert(["ner-evaluate", "--model", str(missing), "--data", str(files / "wines.csv")]) == 1
    assert f"--model {missing} does not exist" in capsys.readouterr().err


def test_one_rule_tells_a_place_on_this_machine_from_a_hub_id_or_a_setting(tmp_path, monkeypatch):
    """The rule that both loading (check the folder before the Hub) and publishing (never print a
    local path into a card) use: a Hub id has at most one slash and does not exist here."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my-model").mkdir()
    local = ["/abs/model", "./model", "../model", "~/model", "outputs/wines/minilm", "my-model", tmp_path]
    remote = ["sentence-transformers/all-MiniLM-L6-v2", "bert-base-uncased", "concat", "", None, 0.3]
    assert [value for value in local if not is_local(value)] == []
    assert [value for value in remote if is_local(value)] == []
