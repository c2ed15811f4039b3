"""RecoBERT on the shared trainer: its forward, its loss terms, its config and its recipe."""

import json
import subprocess

import numpy as np
import pytest
import torch
from conftest import QUICK_RUN, REPO_ROOT, accelerate_command, flags
from transformers import AutoModel

from metricbert_trainer.base.modeling import load_masked_lm
from metricbert_trainer.base.pooling import mean_pool
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.recobert import RecoBertCollator, RecoBertConfig, RecoBertTrainer
from metricbert_trainer.recobert.forward import enable_pair_forward
from metricbert_trainer.scripts.arguments import DataArguments, ModelArguments, parse_recipe_args


@pytest.fixture(scope="module")
def wine_items(wines_csv):
    return load_catalog(wines_csv).dataset.select(range(16))


def test_pair_forward_pools_each_segment_and_matches_the_models_own_mlm_loss(
    tiny_model_path, tokenizer, wine_items
):
    torch.manual_seed(0)
    batch = RecoBertCollator(tokenizer, max_length=96, mlm_probability=0.3)(list(wine_items)[:6])
    model = enable_pair_forward(
        load_masked_lm(tiny_model_path, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0).eval()
    )
    inputs = {name: batch[name] for name in ("input_ids", "attention_mask", "token_type_ids")}
    with torch.no_grad():
        ours = model(pair_batch=batch)
        reference = model(**inputs, labels=batch["labels"], output_hidden_states=True)
    hidden = reference.hidden_states[-1]
    torch.testing.assert_close(ours["title_embeddings"], mean_pool(hidden, batch["title_mask"]))
    torch.testing.assert_close(ours["description_embeddings"], mean_pool(hidden, batch["description_mask"]))
    torch.testing.assert_close(ours["mlm_loss"], reference.loss)


def _config(tmp_path, **overrides):
    values = dict(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=8,
        learning_rate=3e-3,
        num_train_epochs=100,
        logging_steps=5,
        save_strategy="no",
        report_to="none",
        seed=0,
        max_length=96,
        use_cpu=True,
    )
    values.update(overrides)
    return RecoBertConfig(**values)


def test_matching_loss_falls_terms_are_logged_and_the_card_records_the_objective(
    tmp_path, tiny_model_path, tokenizer, wine_items
):
    args = _config(tmp_path, mlm_weight=0.1, mlm_probability=0.15)
    trainer = RecoBertTrainer(
        load_masked_lm(tiny_model_path), args, train_dataset=wine_items, processing_class=tokenizer
    )
    trainer.train()
    history = [entry for entry in trainer.state.log_history if "tdm_loss" in entry]
    assert len(history) == 40
    tdm = [entry["tdm_loss"] for entry in history]
    assert np.mean(tdm[-8:]) < 0.7 * np.mean(tdm[:8]), tdm
    # Learning to match means matched pairs end up scoring above mismatched ones (the tiny model
    # memorises its 16 items: the gap grows from about 0.01 to about 0.5).
    gap = [entry["tdm_score_matched"] - entry["tdm_score_mismatched"] for entry in history]
    assert np.mean(gap[-8:]) > np.mean(gap[:8]) + 0.2, gap
    for key in ("mlm_loss", "tdm_accuracy", "loss"):
        assert key in history[0]
    # The total is the weighted sum of the logged terms.
    first = history[0]
    assert first["loss"] == pytest.approx(first["tdm_loss"] + 0.1 * first["mlm_loss"], rel=1e-3)
    trainer.save_model(args.output_dir)
    trainer.create_model_card(model_name="tiny-recobert")
    card = (tmp_path / "out" / "README.md").read_text()
    assert "## RecoBERT objective" in card
    # RecoBERT's paper and inference, and a snippet encoding the first training item.
    assert "malkiel2020recobert" in card and "malkiel2022metricbert" not in card and "Metric_Inf" not in card
    assert json.dumps(" ".join(wine_items[0]["title"].split()), ensure_ascii=False) in card
    recorded = json.loads(card.split("```json\n")[-1].split("```")[0])
    assert recorded == json.loads(json.dumps(args.loss_config()))
    AutoModel.from_pretrained(args.output_dir)


TYPES = (ModelArguments, DataArguments, RecoBertConfig)


def test_recipe_configs_parse_and_cli_overrides_the_weights():
    _, data, training = parse_recipe_args(
        TYPES,
        ["--inference_weights", "1", "1", "0", "0", "--rerank_top_k", "0"],
        default_config=REPO_ROOT / "recipes" / "wines" / "recobert.yaml",
    )
    assert training.inference_weights == [1.0, 1.0, 0.0, 0.0] and training.rerank_top_k == 0
    assert training.mlm_weight == 0.0 and training.learning_rate == 1e-4 and training.max_length == 256
    assert data.text_columns == ["title", "description"]
    _, _, paper = parse_recipe_args(
        TYPES, ["--config", str(REPO_ROOT / "recipes" / "wines" / "recobert_paper.yaml")]
    )
    assert paper.mlm_weight == 1.0 and paper.mlm_probability == 0.15 and paper.tdm_weight == 1.0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"inference_weights": [1.0, 1.0]}, "needs 4 values"),
        ({"negative_probability": 1.5}, "negative_probability"),
        ({"rerank_top_k": -1}, "rerank_top_k"),
        ({"mlm_weight": 1.0}, "needs masked tokens"),
    ],
)
def test_invalid_settings_fail_before_any_model_loads(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        RecoBertConfig(output_dir=str(tmp_path), report_to="none", **overrides)


@pytest.mark.slow
def test_accelerate_launch_trains_and_evaluates_recobert(tmp_path, tiny_model_path):
    output_dir = tmp_path / "run"
    command = accelerate_command(
        "single_gpu.yaml",
        "recipes/train_recobert_wines.py",
        *flags(
            model_name_or_path=tiny_model_path,
            output_dir=output_dir,
            **QUICK_RUN,
            max_length="96",
            rerank_top_k="10",
        ),
    )
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 0, result.stderr[-3000:]
    assert "'tdm_loss'" in output and "'mlm_loss'" in output and "4/4" in result.stderr
    metrics = json.loads((output_dir / "eval_results.json").read_text())
    assert {"eval_mpr", "eval_mrr", "eval_hr@10", "eval_hr@100"} <= set(metrics)
    assert "## RecoBERT objective" in (output_dir / "README.md").read_text()
