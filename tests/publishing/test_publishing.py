"""Publishing a trained model: the folder a recipe writes, its card, its plots and its upload.

One recipe run (tiny BERT, in-process) trains with an evaluation, a checkpoint and
``push_to_hub``; the Hub client is replaced by a recorder (there is no network here), which also
applies huggingface_hub's own file filter to show what would be uploaded.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import REPO_ROOT, WINES_ANNOTATIONS, WINES_CSV, bare_config, flags
from huggingface_hub import ModelCard
from huggingface_hub.utils import filter_repo_objects
from safetensors.torch import load_file
from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer

from metricbert_trainer.base.modeling import load_masked_lm
from metricbert_trainer.cli import main as cli_main
from metricbert_trainer.evaluation.encoding import encode_texts
from metricbert_trainer.metricbert.trainer import MetricBertTrainer
from metricbert_trainer.ner.trainer import NerTrainer
from metricbert_trainer.publishing.model_card import ModelCardInfo, render_model_card, usage_examples
from metricbert_trainer.recobert import RecoBertTrainer
from metricbert_trainer.scripts.arguments import DataArguments, ModelArguments
from metricbert_trainer.scripts.train import main as recipe_main
from metricbert_trainer.scripts.train import plot_recipe_embeddings

FAKE_TOKEN = "hf_fakeTokenForTests0123456789"
HUB_ID = "someone/metricbert-wines-tiny"
TEXTS = ["Rainstorm 2013 Pinot Gris (Willamette Valley)", "Tart and snappy, lime flesh and rind. " * 40]


class RecordingHub:
    """Stands in for ``huggingface_hub.HfApi`` at the network boundary."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []

    def create_repo(self, repo_id, token=None, private=None, exist_ok=False, **kwargs):
        self.calls.append(("create_repo", {"repo_id": repo_id, "token": token, "private": private}))
        return SimpleNamespace(repo_id=repo_id)

    def upload_folder(self, *, repo_id, folder_path, token=None, ignore_patterns=None, **kwargs):
        files = [
            str(path.relative_to(folder_path)) for path in Path(folder_path).rglob("*") if path.is_file()
        ]
        selected = sorted(filter_repo_objects(files, ignore_patterns=ignore_patterns))
        self.calls.append(
            (
                "upload_folder",
                {
                    "repo_id": repo_id,
                    "folder_path": folder_path,
                    "token": token,
                    "files": selected,
                    "commit_message": kwargs.get("commit_message"),
                },
            )
        )
        return SimpleNamespace(commit_url=f"https://huggingface.co/{repo_id}")


@pytest.fixture(scope="module")
def published(tmp_path_factory, tiny_model_path):
    """The wines recipe with a checkpoint, evaluations and push_to_hub, the token in the environment."""
    import transformers.trainer

    hub = RecordingHub()
    output_dir = tmp_path_factory.mktemp("published") / "wines-tiny"
    import huggingface_hub.constants

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(transformers.trainer, "hf_api", lambda: hub)
        patch.setenv("HF_TOKEN", FAKE_TOKEN)
        # The recorder is the network here, so the run is not offline (the recipe refuses to push
        # when it is).
        patch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
        run = recipe_main(
            flags(
                model_name_or_path=tiny_model_path,
                catalog=WINES_CSV,
                annotations=WINES_ANNOTATIONS,
                output_dir=output_dir,
                max_train_items=64,
                max_steps=4,
                mlm_head_warmup_steps=2,
                per_device_train_batch_size=16,
                logging_steps=1,
                save_strategy="steps",
                save_steps=2,
                eval_strategy="steps",
                eval_steps=2,
                push_to_hub="true",
                hub_model_id=HUB_ID,
                hub_strategy="end",
                hub_private_repo="true",
            ),
            default_config=REPO_ROOT / "recipes" / "wines" / "minilm.yaml",
        )
    return SimpleNamespace(output_dir=output_dir, hub=hub, metrics=run.metrics, model_path=tiny_model_path)


@pytest.mark.parametrize("folder", ["final", "checkpoint"])
def test_saved_folders_load_everywhere_with_the_encoders_embeddings(
    published, folder, capfd, transformers_caplog
):
    from sentence_transformers import SentenceTransformer

    path = published.output_dir if folder == "final" else published.output_dir / "checkpoint-4"
    capfd.readouterr()
    masked_lm = AutoModelForMaskedLM.from_pretrained(path, subfolder="masked_lm")
    encoder = AutoModel.from_pretrained(path)
    model = SentenceTransformer(str(path), device="cpu")
    # The encoder on top and the masked-LM model in masked_lm/: every loader reads a file that
    # matches its model, so none prints transformers' load report.
    captured = capfd.readouterr()
    printed = captured.out + captured.err + transformers_caplog.text
    assert "LOAD REPORT" not in printed and "corrupted" not in printed
    assert type(encoder).__name__ == "BertModel" and type(masked_lm).__name__ == "BertForMaskedLM"
    trained_head = load_file(path / "masked_lm" / "model.safetensors")[
        "cls.predictions.transform.dense.weight"
    ]
    assert torch.equal(masked_lm.cls.predictions.transform.dense.weight, trained_head)
    assert torch.equal(load_masked_lm(str(path)).cls.predictions.transform.dense.weight, trained_head)
    for name, parameter in masked_lm.bert.named_parameters():
        assert torch.equal(parameter, encoder.get_parameter(name)), name
    trained_length = json.loads((path / "training_args.json").read_text(encoding="utf-8"))["max_length"]
    assert model.max_seq_length == trained_length  # the training length, so long texts are cut the same way
    ours = encode_texts(
        load_masked_lm(str(path)), AutoTokenizer.from_pretrained(path), TEXTS, max_length=trained_length
    )
    np.testing.assert_allclose(model.encode(TEXTS), ours, atol=1e-5)


def test_card_metadata_parses_back_and_is_complete(published):
    card = ModelCard.load(published.output_dir / "README.md")
    data = card.data
    assert data.library_name == "sentence-transformers" and data.pipeline_tag == "sentence-similarity"
    assert {"metricbert", "sentence-transformers", "metric-learning"} <= set(data.tags)
    assert data.license == "cc-by-nc-sa-4.0" and data.datasets == ["winemag-sample-5811"]
    assert data.base_model is None  # a local starting model is not named
    results = {result.metric_type: result.metric_value for result in data.eval_results}
    assert results == pytest.approx({name: published.metrics[f"eval_{name}"] for name in results}, abs=1e-4)
    assert set(results) == {"mpr", "mrr", "hr@10", "hr@100", "map", "ndcg@20"}
    body = card.text
    for heading in (
        "## Usage",
        "## MetricBERT objective",
        "## Training hyperparameters",
        "## Training logs",
        "## Evaluation",
        "## Framework versions",
        "## Citation",
    ):
        assert heading in body, heading
    assert f'SentenceTransformer("{HUB_ID}")' in body and f'AutoModel.from_pretrained("{HUB_ID}")' in body
    assert '"margin": 0.1' in body and "| `learning_rate` | 5e-05 |" in body
    assert "| 4 | 1.00 |" in body  # the last logged step in the loss table
    # The evaluation says which seeds its numbers are of, by the annotation file's name only.
    assert "against its annotated similar items (`proxy-annotations-100-seeds.csv`)" in body
    assert "malkiel2022metricbert" in body
    # The usage snippets encode the first training item, not a hard-coded text.
    assert 'model.encode(["Nicosia 2013 Vulkà Bianco (Etna)", "Aromas include tropical fruit' in body


def _untrained_card(trainer, info: ModelCardInfo, model_name: str = "demo") -> str:
    """The card ``trainer`` writes for ``model_name``, before any training step or evaluation."""
    return render_model_card(
        info=info,
        model_name=model_name,
        method=trainer.card_method,
        repo_id=None,
        objective_section="",
        hyperparameters={},
        log_history=[],
        trainer_tags=list(trainer._tag_names),
    )


HOSTILE_NAME = 'm"); __import__("os").system("id"); ("`x'


@pytest.mark.parametrize("trainer", [MetricBertTrainer, RecoBertTrainer, NerTrainer])
def test_a_model_name_enters_the_cards_code_only_as_a_string(trainer):
    """An output folder's name is the user's to choose: in every Python snippet of the card it is
    one string literal, and the shell line quotes it; it never becomes code."""
    card = _untrained_card(trainer, ModelCardInfo(), model_name=HOSTILE_NAME)
    blocks = re.findall(r"```python\n(.*?)```", card, flags=re.DOTALL)
    assert blocks
    for block in blocks:
        tree = ast.parse(block)
        called = {
            getattr(node.func, "attr", getattr(node.func, "id", None))
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
        }
        assert not called & {"system", "__import__"}, block
        assert any(
            isinstance(node, ast.Constant) and node.value == HOSTILE_NAME for node in ast.walk(tree)
        ), block
    for line in re.findall(r"`+ ?(accelerate launch .*?) ?`+\.?$", card, flags=re.MULTILINE):
        assert shlex.split(line)[-1] == HOSTILE_NAME


def test_card_names_a_hub_base_model():
    info = ModelCardInfo(base_model="sentence-transformers/all-MiniLM-L6-v2", catalog="/data/items.csv")
    card = _untrained_card(MetricBertTrainer, info)
    data = ModelCard(card).data
    assert data.base_model == "sentence-transformers/all-MiniLM-L6-v2" and data.datasets == ["items.csv"]
    assert "/data/" not in card and "model-index" not in card  # no evaluation ran


@pytest.mark.parametrize(
    ("trainer", "own", "others"),
    [
        (MetricBertTrainer, ("malkiel2022metricbert", "Metric_Inf"), ("malkiel2020recobert",)),
        (
            RecoBertTrainer,
            ("malkiel2020recobert", "four z-normalised scores"),
            ("malkiel2022metricbert", "Metric_Inf"),
        ),
    ],
)
def test_each_trainers_card_cites_and_describes_its_own_method(trainer, own, others):
    examples = ('Nicosia 2013 Vulkà Bianco  (Etna) "rare"', "Aromas include tropical fruit.")
    card = _untrained_card(trainer, ModelCardInfo(examples=examples))
    assert all(text in card for text in own) and not any(text in card for text in others)
    assert f"`{trainer.__name__}`" in card and trainer.card_method.script in card
    # The usage snippets encode the examples, as valid Python, and no hard-coded catalog's text.
    snippet = card.split("```python\n")[1].split("```")[0]
    assert (
        'model.encode(["Nicosia 2013 Vulkà Bianco  (Etna) \\"rare\\"", "Aromas include tropical fruit."])'
        in snippet
    )
    compile(snippet, "usage", "exec")
    assert "Rainstorm" not in card


def test_usage_examples_are_an_items_texts_cut_to_a_snippet():
    item = {"title": "Rainstorm  2013 Pinot Gris", "description": "Tart and snappy. " * 20, "id": 7}
    title, description = usage_examples(item, ("title", "description"))
    assert title == "Rainstorm 2013 Pinot Gris"
    assert description.endswith(" ...") and len(description) <= 124 and "  " not in description


def test_no_local_path_or_token_in_any_published_file(published):
    forbidden = [
        FAKE_TOKEN,
        str(published.output_dir.parent),
        published.model_path,
        str(WINES_CSV),
        str(REPO_ROOT),
    ]
    for path in published.output_dir.rglob("*"):
        if path.is_file():
            content = path.read_bytes()
            for text in forbidden:
                assert text.encode() not in content, f"{text!r} found in {path.name}"


def test_upload_goes_to_the_named_repo_with_the_card_and_without_checkpoints(published):
    create, upload = (
        [args for name, args in published.hub.calls if name == "create_repo"],
        [args for name, args in published.hub.calls if name == "upload_folder"],
    )
    assert create == [{"repo_id": HUB_ID, "token": None, "private": True}]
    # save_model pushes the model as it is saved and the recipe pushes again once the final card
    # and plots are written, as transformers' example scripts do.
    assert len(upload) == 2 and all(call["repo_id"] == HUB_ID for call in upload)
    assert all(Path(call["folder_path"]) == published.output_dir for call in upload)
    assert all(call["token"] is None for call in upload)  # huggingface_hub reads HF_TOKEN or the login
    assert upload[-1]["commit_message"] == "MetricBERT training finished"  # the card's family
    files = upload[-1]["files"]
    assert "training_args.bin" not in files
    for name in (
        "README.md",
        "model.safetensors",
        "config.json",
        "masked_lm/model.safetensors",
        "masked_lm/config.json",
        "modules.json",
        "1_Pooling/config.json",
        "sentence_bert_config.json",
        "loss_terms.png",
        "embeddings_pca.png",
        "tokenizer.json",
    ):
        assert name in files, name
    assert not any(name.startswith("checkpoint-") for name in files)


def test_plots_are_written_and_non_empty(published):
    for name in ("loss_terms.png", "embeddings_pca.png"):
        content = (published.output_dir / name).read_bytes()
        assert content.startswith(b"\x89PNG") and len(content) > 10_000, name


def test_plot_command_draws_a_checkpoint(published, tmp_path, capsys, caplog):
    checkpoint = published.output_dir / "checkpoint-4"
    common = ["--catalog", str(WINES_CSV), "--column", "variety", "--max-items", "300"]
    assert cli_main(["plot", str(checkpoint), *common, "--output-dir", str(tmp_path)]) == 1
    assert "names no base model" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # refused before it wrote anything
    assert (
        cli_main(
            [
                "plot",
                str(checkpoint),
                *common,
                "--before",
                published.model_path,
                "--output-dir",
                str(tmp_path),
            ]
        )
        == 0
    )
    for name in ("loss_terms.png", "embeddings_pca.png"):
        assert (tmp_path / name).read_bytes().startswith(b"\x89PNG")
    # Encoding two models takes minutes on a CPU: each says so, and draws its bar.
    messages = [record.getMessage() for record in caplog.records]
    for when in ("before", "after"):
        assert f"Encoding 300 items {when} training for the projection plot, in fp32." in messages
    # ... and the end of the phase, with the file it wrote.
    assert any(
        message.startswith(f"Projection plot of 300 items written to {tmp_path / 'embeddings_pca.png'} in ")
        for message in messages
    )
    assert "Encoding: 100%" in capsys.readouterr().err


def test_the_recipes_plot_encodes_at_the_runs_precision(tiny_model_path, tmp_path, caplog):
    """A run trained under bf16 plots under bf16 (1.5 to 2.3 times as fast on a CPU that chose it); the
    evaluation's fp32 is left alone."""
    import shutil

    from metricbert_trainer.data.catalog import load_catalog

    trained = tmp_path / "trained"
    shutil.copytree(tiny_model_path, trained)
    catalog = load_catalog(WINES_CSV)
    for bf16, precision in ((True, "bf16"), (False, "fp32")):
        caplog.clear()
        with caplog.at_level("INFO", logger="metricbert_trainer.publishing.plots"):
            written = plot_recipe_embeddings(
                ModelArguments(model_name_or_path=tiny_model_path),
                DataArguments(catalog=str(WINES_CSV), plot_column="variety"),
                bare_config(output_dir=str(trained), bf16=bf16, cpu_bf16=bf16, use_cpu=True, max_length=16),
                catalog,
                ["red"] * len(catalog),
            )
        assert written.read_bytes().startswith(b"\x89PNG")
        for when in ("before", "after"):
            assert (
                f"Encoding 2000 items {when} training for the projection plot, in {precision}."
                in caplog.messages
            )


def test_a_token_in_the_arguments_is_refused(tmp_path):
    with pytest.raises(ValueError, match="HF_TOKEN"):
        bare_config(output_dir=str(tmp_path), hub_token=FAKE_TOKEN)


def test_saved_training_arguments_are_json_without_paths(published):
    # JSON rather than transformers' pickled training_args.bin: reading it runs no code.
    assert not list(published.output_dir.rglob("training_args.bin"))
    arguments = json.loads((published.output_dir / "training_args.json").read_text(encoding="utf-8"))
    assert arguments["output_dir"] == "<local path>" and arguments["hub_model_id"] == HUB_ID
