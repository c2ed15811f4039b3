"""No command writes over a file it reads, or over one it did not create unless told to
(``data.output_files``): each command and a recipe, run on real files, with the files checked
byte for byte afterwards."""

from __future__ import annotations

import errno
import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import QUICK_RUN, REPO_ROOT, WINES_CSV, flags

from metricbert_trainer.cli import main as metricbert
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.data.output_files import (
    RUN_LOCK_FILE,
    RUN_MANIFEST_FILE,
    output_folder_content_problems,
)
from metricbert_trainer.errors import UsageError
from metricbert_trainer.evaluation.encoding import encode_catalog
from metricbert_trainer.evaluation.scorers import load_encoder
from metricbert_trainer.scripts.train import main as train_recipe


def _refused(capsys, arguments: list[str]) -> str:
    assert metricbert(arguments) == 1
    return capsys.readouterr().err


def _catalog_and_annotations(files) -> list[str]:
    return ["--catalog", str(files / "wines.csv"), "--annotations", str(files / "annotations.csv")]


def test_no_command_writes_over_a_file_it_reads(files, tiny_model_path, capsys):
    before = {name: (files / name).read_bytes() for name in ("wines.csv", "annotations.csv")}
    model = ["--model", tiny_model_path]
    for arguments in (
        [
            "evaluate",
            *model,
            *_catalog_and_annotations(files),
            "--output",
            str(files / "wines.csv"),
            "--overwrite",
        ],
        [
            "report",
            "--baselines",
            "tfidf",
            *_catalog_and_annotations(files),
            "--output",
            str(files / "annotations.csv"),
        ],
    ):
        message = _refused(capsys, arguments)
        assert "is a file this command reads; name another file" in message, message
    # The catalog as an embedding cache: not a cache, so never replaced.
    message = _refused(
        capsys,
        [
            "recommend",
            *model,
            "--catalog",
            str(files / "wines.csv"),
            "--item",
            "0",
            "--cache",
            str(files / "wines.csv"),
        ],
    )
    assert f"{files / 'wines.csv'} is not an embedding cache" in message
    assert {name: (files / name).read_bytes() for name in before} == before


def test_no_command_writes_over_a_file_of_a_model_it_loads(files, tiny_model_path, tmp_path, capsys):
    """A model folder a command loads is read whole: its weights, config or any file inside it
    is never an output, with --overwrite too (issue #90)."""
    import shutil

    model = shutil.copytree(tiny_model_path, tmp_path / "model")
    (model / "notes").mkdir()
    (model / "notes" / "results.json").write_text("kept\n", encoding="utf-8")
    before = {path: path.read_bytes() for path in model.rglob("*") if path.is_file()}
    weights = next(path for path in before if path.suffix == ".safetensors")
    for arguments in (
        ["evaluate", "--model", str(model), "--output", str(model / "config.json")],
        ["report", "--models", f"mine={model}", "--output", str(weights)],
        ["compare", "--models", str(model), "--output-dir", str(model / "notes")],
    ):
        message = _refused(capsys, [*arguments, *_catalog_and_annotations(files), "--overwrite"])
        assert "is a file this command reads; name another file" in message, message
    for suffix in ("parquet", "csv"):  # recommend --all, found in the sweep beyond the filed cases
        (model / f"items.{suffix}").write_text("mine\n", encoding="utf-8")
        before[model / f"items.{suffix}"] = b"mine\n"
        arguments = ["recommend", "--model", str(model), "--catalog", str(files / "wines.csv"), "--all"]
        message = _refused(capsys, [*arguments, "--output", str(model / f"items.{suffix}"), "--overwrite"])
        assert "is a file this command reads; name another file" in message, message
    assert {path: path.read_bytes() for path in model.rglob("*") if path.is_file()} == before


def test_an_existing_output_is_replaced_only_with_overwrite(files, tiny_model_path, tmp_path, capsys):
    output = tmp_path / "notes.json"
    output.write_text("my notes\n", encoding="utf-8")
    evaluate = [
        "evaluate",
        "--model",
        tiny_model_path,
        *_catalog_and_annotations(files),
        "--max-length",
        "32",
    ]
    message = _refused(capsys, [*evaluate, "--output", str(output)])
    assert f"--output {output} exists; pass --overwrite to replace it" in message
    assert output.read_text(encoding="utf-8") == "my notes\n"
    assert metricbert([*evaluate, "--output", str(output), "--overwrite"]) == 0
    assert "mpr" in json.loads(output.read_text(encoding="utf-8"))["metrics"]
    (tmp_path / "results.md").write_text("my results\n", encoding="utf-8")
    compare = [
        "compare",
        "--baselines",
        "tfidf",
        *_catalog_and_annotations(files),
        "--output-dir",
        str(tmp_path),
    ]
    assert f"{tmp_path / 'results.md'} exists; pass --overwrite" in _refused(capsys, compare)
    assert (tmp_path / "results.md").read_text(encoding="utf-8") == "my results\n"


def test_the_embedding_cache_replaces_only_a_cache(files, tiny_model_path, tmp_path, capsys):
    cache = tmp_path / "embeddings.npz"
    recommend = [
        "recommend",
        "--model",
        tiny_model_path,
        "--catalog",
        str(files / "wines.csv"),
        "--item",
        "0",
    ]
    for _ in range(2):  # written, then read back (and replaceable) as the cache it is
        assert metricbert([*recommend, "--max-length", "32", "--cache", str(cache)]) == 0
    assert metricbert([*recommend, "--max-length", "24", "--cache", str(cache)]) == 0  # another setting
    capsys.readouterr()
    archive = tmp_path / "user.npz"
    import numpy as np

    np.savez(archive, weights=np.arange(3))
    saved = archive.read_bytes()
    message = _refused(capsys, [*recommend, "--cache", str(archive)])
    assert "is not an embedding cache" in message and archive.read_bytes() == saved


def test_the_caches_beside_the_embeddings_are_read_back_and_replace_only_such_caches(
    files, tiny_model_path, tmp_path, capsys, caplog
):
    """``recommend --cache`` keeps the re-ranking's lists and the hybrid's TF-IDF matrices beside the
    embeddings; the next call on the same catalog and model reads them back, computes neither, and
    answers the same; a user's file where either would go is refused before any work, byte for
    byte untouched, and left alone by a ranking that does not use it."""
    cache = tmp_path / "embeddings.npz"
    recommend = ["recommend", "--model", tiny_model_path, "--catalog", str(files / "wines.csv")]
    recommend += ["--item", "7", "--max-length", "32", "--shared-neighbours", "5", "--cache", str(cache)]
    assert metricbert(recommend) == 0
    first = capsys.readouterr().out
    lists, tfidf = tmp_path / "embeddings.shared-neighbours.npz", tmp_path / "embeddings.tfidf.npz"
    assert lists.is_file() and tfidf.is_file()
    caplog.clear()
    with caplog.at_level("INFO", logger="metricbert_trainer.evaluation"):
        assert metricbert(recommend) == 0
    assert capsys.readouterr().out == first
    assert f"reusing the lists of {lists}" in caplog.text and "listing the" not in caplog.text
    assert f"Reusing the TF-IDF matrices of {tfidf}" in caplog.text and "Wrote the TF-IDF" not in caplog.text
    for kept, kind, unused_with in (
        (lists, "a shared-neighbour lists cache", ["--shared-neighbours", "0"]),
        (tfidf, "a TF-IDF cache", ["--tfidf-weight", "0", "--shared-neighbours", "0"]),
    ):
        np.savez(kept, weights=np.arange(3))
        saved = kept.read_bytes()
        message = _refused(capsys, recommend)
        assert f"is not {kind}" in message and kept.read_bytes() == saved
        assert metricbert([*recommend, *unused_with]) == 0 and kept.read_bytes() == saved
        capsys.readouterr()
        kept.unlink()


def _recipe(tiny_model_path, files, output_dir, **options) -> list[str]:
    settings = {
        "model_name_or_path": tiny_model_path,
        "catalog": files / "wines.csv",
        "annotations": "",
        "output_dir": output_dir,
        "save_strategy": "no",
        "eval_strategy": "no",
        "mlm_head_warmup_steps": 0,
        "warmup_steps": 0,  # a run of a step or two has no schedule to warm up
        "report_to": "none",
        "disable_tqdm": "true",
        **QUICK_RUN,
        "max_train_items": 32,
        "max_steps": 1,
    }
    return flags(**(settings | options))


def test_a_users_folder_is_refused_before_the_model_loads(files, tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "README.md").write_text("my readme\n", encoding="utf-8")
    (folder / "config.json").write_text("{}\n", encoding="utf-8")
    # A model path that does not exist: the folder is refused before anything would load it.
    with pytest.raises(
        UsageError, match="holds files no run of this library wrote \\(README.md, config.json\\)"
    ):
        train_recipe(_recipe(str(tmp_path / "no-model"), files, folder))
    assert sorted(path.name for path in folder.iterdir()) == ["README.md", "config.json"]


def test_overwriting_a_users_folder_replaces_only_what_the_run_writes(files, tiny_model_path, tmp_path):
    """The same command twice (issue #90: the first run's mark made the second treat the user's
    folder as an earlier run, and remove notes.txt with it)."""
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "README.md").write_text("my readme\n", encoding="utf-8")
    (folder / "notes.txt").write_text("mine\n", encoding="utf-8")
    for _ in range(2):
        train_recipe(_recipe(tiny_model_path, files, folder, overwrite_output_dir="true"))
        assert (folder / "notes.txt").read_text(encoding="utf-8") == "mine\n"
        assert "my readme" not in (folder / "README.md").read_text(encoding="utf-8")  # the model card
    # The manifest: the user's notes are not the run's; README.md is the card now, the run's.
    manifest = json.loads((folder / RUN_MANIFEST_FILE).read_text(encoding="utf-8"))
    assert manifest["not_written"] == ["notes.txt"] and "README.md" in manifest["written"]


def test_an_earlier_run_is_resumed_or_replaced_never_mixed(files, tiny_model_path, tmp_path):
    """What the earlier run wrote goes (its checkpoint, which the new run would not write), and
    nothing else: a file the user put there since stays."""
    folder = tmp_path / "run"
    train_recipe(_recipe(tiny_model_path, files, folder, save_strategy="steps", save_steps=1))
    assert (folder / RUN_LOCK_FILE).is_file() and (folder / "checkpoint-1").is_dir()
    mine = folder / "my_notes.txt"
    mine.write_text("mine\n", encoding="utf-8")
    with pytest.raises(
        UsageError, match="already holds an earlier run's files .*resume_from_checkpoint last"
    ):
        train_recipe(_recipe(tiny_model_path, files, folder))
    train_recipe(_recipe(tiny_model_path, files, folder, overwrite_output_dir="true"))
    assert not (folder / "checkpoint-1").exists() and (folder / "model.safetensors").is_file()
    assert mine.read_text(encoding="utf-8") == "mine\n"


def test_overwriting_an_earlier_run_keeps_the_files_the_new_run_reads(files, tiny_model_path, tmp_path):
    """Issue #90: the catalog and annotations kept inside the earlier run's folder were removed with
    it, and the run then failed on a catalog it had just deleted; a starting model in the folder is
    refused before anything is removed."""
    import shutil

    folder = tmp_path / "run"
    train_recipe(_recipe(tiny_model_path, files, folder, save_strategy="steps", save_steps=1))
    catalog = shutil.copy(files / "wines.csv", folder / "mycat.csv")
    annotations = shutil.copy(files / "annotations.csv", folder / "ann.csv")
    # As a run older than manifests left its folder: every entry but the inputs is removed.
    (folder / RUN_MANIFEST_FILE).unlink()
    before = {path: path.read_bytes() for path in (catalog, annotations)}
    flags_in_folder = ["--catalog", str(catalog), "--annotations", str(annotations), "--eval_strategy", "no"]
    train_recipe([*_recipe(tiny_model_path, files, folder, overwrite_output_dir="true"), *flags_in_folder])
    assert {path: path.read_bytes() for path in before} == before
    assert not (folder / "checkpoint-1").exists() and (folder / "model.safetensors").is_file()
    untouched = sorted(path.name for path in folder.iterdir())
    with pytest.raises(UsageError, match="holds the model the run starts from .*name another output_dir"):
        train_recipe(_recipe(str(folder), files, folder, overwrite_output_dir="true"))
    assert sorted(path.name for path in folder.iterdir()) == untouched


def test_a_run_that_fails_early_leaves_no_folder_behind(files, tiny_model_path, tmp_path):
    folder = tmp_path / "new"
    with pytest.raises(Exception, match="missing column"):
        train_recipe([*_recipe(tiny_model_path, files, folder), "--text_columns", "title", "tagline"])
    assert not folder.exists()


def test_an_output_that_cannot_be_written_is_refused_before_any_work(files, capsys, tmp_path):
    """Found before the catalog is encoded, not when the result is written minutes later. (Run as
    root, the permission case cannot be shown; a path under a file can.)"""
    blocker = tmp_path / "a-file"
    blocker.write_text("x", encoding="utf-8")
    evaluate = ["evaluate", "--model", str(tmp_path / "no-model"), *_catalog_and_annotations(files)]
    message = _refused(capsys, [*evaluate, "--output", str(blocker / "metrics.json")])
    assert f"--output {blocker / 'metrics.json'} cannot be created: {blocker} is a file" in message
    message = _refused(capsys, [*evaluate, "--cache", str(blocker / "cache.npz")])
    assert f"the embedding cache {blocker / 'cache.npz'} cannot be created: {blocker} is a file" in message


def test_a_cache_write_that_fails_leaves_no_partial_file(files, tiny_model_path, tmp_path, monkeypatch):
    """A full disk mid-write (numpy's writer made to fail as ENOSPC does, after half the bytes): the
    error reaches the user and no half-written archive stays beside the cache."""

    def disk_full(path, **arrays):
        path.write_bytes(b"PK\x03\x04 half an archive")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np, "savez", disk_full)
    model, tokenizer = load_encoder(tiny_model_path, device="cpu")
    catalog = load_catalog(files / "wines.csv")
    with pytest.raises(OSError, match="No space left on device"):
        encode_catalog(model, tokenizer, catalog, max_length=16, cache_path=tmp_path / "cache.npz")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_ctrl_c_during_a_command_is_one_line_and_status_130(tiny_model_path, tmp_path):
    cache = tmp_path / "cache.npz"
    # The whole wine sample, one text a batch: minutes of encoding, interrupted in its first seconds.
    command = [sys.executable, "-m", "metricbert_trainer.cli", "recommend", "--model", tiny_model_path]
    command += ["--catalog", str(WINES_CSV), "--item", "0", "--cache", str(cache), "--batch-size", "1"]
    # Ctrl-C as a terminal delivers it: the child starts with SIGINT's default disposition, whatever
    # an earlier test left in this process (a child inherits an ignored SIGINT, and Python then
    # never raises KeyboardInterrupt; the whole suite once ran the command to its end that way).
    process = subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    error = ""
    while time.monotonic() < deadline and "Encoding" not in error:
        character = process.stderr.read(1)
        if not character:
            break
        error += character  # the progress bar: encoding has begun
    assert "Encoding" in error, f"the command never began encoding: {error[-2000:]}"
    process.send_signal(signal.SIGINT)
    error += process.stderr.read()
    assert process.wait(timeout=60) == 130
    assert error.strip().endswith("metricbert recommend: interrupted") and "Traceback" not in error
    assert not cache.exists() and not list(tmp_path.iterdir())


def test_a_checkpoint_copied_into_a_new_folder_is_resumed_there(tmp_path):
    """Moving a run: a checkpoint copied into a fresh folder may be resumed in it (the DDP and
    FSDP resume tests do so end to end), but the folder is not written over without resuming."""
    (tmp_path / "checkpoint-2").mkdir()
    (tmp_path / "checkpoint-2" / "trainer_state.json").write_text("{}", encoding="utf-8")
    assert output_folder_content_problems(tmp_path, overwrite=False, resuming=True) == []
    (problem,) = output_folder_content_problems(tmp_path, overwrite=False, resuming=False)
    assert "holds files no run of this library wrote (checkpoint-2)" in problem


def test_a_setting_that_starts_afresh_is_no_resume(files, tmp_path):
    """``resume_from_checkpoint: false`` (or "") starts afresh (``checkpoints.resumes``), so it does
    not open an earlier run's folder to being written over."""
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / RUN_LOCK_FILE).write_text("", encoding="utf-8")
    (folder / "model.safetensors").write_bytes(b"an earlier run's weights")
    for setting in ("false", ""):
        with pytest.raises(UsageError, match="already holds an earlier run's files"):
            train_recipe(_recipe(str(tmp_path / "no-model"), files, folder, resume_from_checkpoint=setting))


def test_after_a_run_killed_midway_only_what_was_not_there_before_it_is_removed(tmp_path):
    """A run killed before its end recorded, at its start, what the folder held: overwriting it
    removes the rest (its checkpoint), never those; a file the new run reads stays too."""
    from metricbert_trainer.data.output_files import clear_earlier_run, record_run_start

    folder = tmp_path / "run"
    folder.mkdir()
    (folder / RUN_LOCK_FILE).write_text("", encoding="utf-8")
    (folder / "notes.txt").write_text("mine\n", encoding="utf-8")
    record_run_start(folder)  # the killed run's start; it never reached record_run_end
    (folder / "checkpoint-3").mkdir()
    (folder / "checkpoint-3" / "model.safetensors").write_bytes(b"weights")
    (folder / "ranked.csv").write_text("id\n", encoding="utf-8")
    clear_earlier_run(folder, earlier_run=True, reads=[folder / "ranked.csv"])
    assert sorted(path.name for path in folder.iterdir()) == [RUN_LOCK_FILE, "notes.txt", "ranked.csv"]


def test_an_output_is_replaced_whole_or_not_at_all(tmp_path):
    """Every output a command writes goes through ``write_whole``: a write that fails midway (a full
    disk, Ctrl-C) leaves the earlier file as it was and no temporary file beside it; two writes of
    one output each write a file of their own, the last rename winning whole."""
    from metricbert_trainer.data.output_files import write_text_whole, write_whole

    output = tmp_path / "metrics.json"
    write_text_whole(output, '{"map": 1}\n')

    def half_then_interrupted(temporary):
        temporary.write_text('{"map": 2', encoding="utf-8")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_whole(output, half_then_interrupted)
    assert output.read_text(encoding="utf-8") == '{"map": 1}\n'
    assert [path.name for path in tmp_path.iterdir()] == ["metrics.json"]
    temporaries = []
    write_whole(
        output,
        lambda first: (
            temporaries.append(first),
            write_text_whole(output, "second\n"),
            first.write_text("first\n"),
        ),
    )
    assert output.read_text(encoding="utf-8") == "first\n" and temporaries[0] != output
