import logging
import shutil
from pathlib import Path

import pytest
import torch
from conftest import dropout_free_metric_model, masked_wine_batch
from safetensors.torch import load_file, save_file

from metricbert_trainer.base import modeling
from metricbert_trainer.base.collator import field_inputs
from metricbert_trainer.base.modeling import (
    find_mlm_head,
    freeze_mlm_head,
    load_masked_lm,
    resolve_model_name,
)
from metricbert_trainer.base.pooling import mean_pool
from metricbert_trainer.metricbert.collator import MetricBertCollator
from metricbert_trainer.metricbert.forward import PoolingInput, _metric_forward, joined_fields

ITEMS = [
    {
        "title": "Rainstorm 2013 Pinot Gris (Willamette Valley)",
        "description": "Tart and snappy, lime flesh and rind.",
    },
    {
        "title": "Nicosia 2013 Vulkà Bianco (Etna)",
        "description": "Aromas include tropical fruit, broom and dried herb.",
    },
    {
        "title": "Sweet Cheeks 2012 Pinot Noir",
        "description": "Much like the regular bottling, this comes across as rather rough.",
    },
]


def test_masked_only_head_matches_the_models_own_mlm_loss(tiny_model_path, tokenizer):
    torch.manual_seed(0)
    batch = MetricBertCollator(tokenizer, mlm_probability=0.3)(ITEMS)
    model = dropout_free_metric_model(tiny_model_path)
    with torch.no_grad():
        ours = model(metric_batch=batch, fields=("title", "description"))
        # Reference: transformers' own forward over every token, both fields' masked tokens pooled.
        losses, counts = [], []
        for name in ("title", "description"):
            inputs = field_inputs(batch, name)
            output = model(**inputs)
            counts.append((inputs["labels"] != -100).sum())
            losses.append(output.loss * counts[-1])
            pooled = mean_pool(
                model.base_model(**{k: v for k, v in inputs.items() if k != "labels"}).last_hidden_state,
                inputs["attention_mask"],
            )
            torch.testing.assert_close(ours["embeddings"][0 if name == "title" else 1], pooled)
    torch.testing.assert_close(ours["mlm_loss"], sum(losses) / sum(counts))


def test_unknown_head_layout_falls_back_to_full_forward(tiny_model_path, tokenizer):
    """Models whose head we cannot find get the full forward; both paths give the same numbers."""
    torch.manual_seed(0)
    batch = MetricBertCollator(tokenizer, mlm_probability=0.3)(ITEMS)
    model = dropout_free_metric_model(tiny_model_path)
    fields = ("title", "description")
    with torch.no_grad():
        fast = _metric_forward(
            model, model._metricbert_plain_forward, find_mlm_head(model), batch, fields, PoolingInput.MASKED
        )
        generic = _metric_forward(
            model, model._metricbert_plain_forward, None, batch, fields, PoolingInput.MASKED
        )
    torch.testing.assert_close(fast["mlm_loss"], generic["mlm_loss"])
    torch.testing.assert_close(fast["embeddings"], generic["embeddings"])


def test_unmasked_pooling_sees_the_original_tokens(tiny_model_path, tokenizer):
    torch.manual_seed(0)
    masked_batch = MetricBertCollator(tokenizer, mlm_probability=0.5)(ITEMS)
    clean_batch = MetricBertCollator(tokenizer, mlm_probability=0.0)(ITEMS)
    model = dropout_free_metric_model(tiny_model_path)
    with torch.no_grad():
        unmasked = model(
            metric_batch=masked_batch, fields=("title", "description"), pooling_input=PoolingInput.UNMASKED
        )
        clean = model(metric_batch=clean_batch, fields=("title", "description"))
    torch.testing.assert_close(unmasked["embeddings"], clean["embeddings"])
    assert unmasked["mlm_loss"] > 0 and clean["mlm_loss"] == 0


def test_default_model_resolves_to_the_offline_copy(minilm_path):
    assert resolve_model_name("sentence-transformers/all-MiniLM-L6-v2") == minilm_path
    assert resolve_model_name("bert-base-uncased") == "bert-base-uncased"


def test_freezing_the_mlm_head_keeps_the_shared_word_embeddings_trainable(tiny_model_path):
    model = load_masked_lm(tiny_model_path)
    frozen = freeze_mlm_head(model)
    assert "predictions.transform.dense.weight" in frozen and "predictions.bias" in frozen
    assert model.get_input_embeddings().weight.requires_grad
    assert all(parameter.requires_grad for parameter in model.base_model.parameters())
    head = find_mlm_head(model)
    trainable = {id(parameter) for parameter in model.base_model.parameters()}
    assert all(not p.requires_grad for p in head.parameters() if id(p) not in trainable)


def test_a_checkpoint_without_mlm_head_loads_with_one_line_instead_of_the_report(
    minilm_path, capfd, transformers_caplog
):
    # The real all-MiniLM-L6-v2 ships no MLM head: transformers' report (a MISSING table and
    # "This checkpoint seem corrupted") becomes one line, said once however often it is loaded.
    modeling._HEADLESS_EXPLAINED.discard(minilm_path)
    with transformers_caplog.at_level(logging.WARNING):
        load_masked_lm(minilm_path)
        load_masked_lm(minilm_path)
    captured = capfd.readouterr()
    printed = captured.out + captured.err + transformers_caplog.text
    assert "LOAD REPORT" not in printed and "corrupted" not in printed and "MISSING" not in printed
    records = transformers_caplog.records
    explanations = [record.getMessage() for record in records if "has no MLM head" in record.getMessage()]
    assert len(explanations) == 1 and minilm_path in explanations[0]


def test_an_unexpected_mismatch_still_gets_transformers_report(
    tiny_model_path, tmp_path, transformers_caplog
):
    weights = load_file(Path(tiny_model_path) / "model.safetensors")
    del weights["bert.encoder.layer.1.output.dense.weight"]
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    shutil.copyfile(Path(tiny_model_path) / "config.json", tmp_path / "config.json")
    load_masked_lm(str(tmp_path))
    printed = transformers_caplog.text
    assert "LOAD REPORT" in printed and "encoder.layer.1.output.dense.weight" in printed
    assert "has no MLM head" not in printed


@pytest.mark.parametrize("pooling_input", list(PoolingInput))
@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_length_groups_and_one_call_for_both_fields_give_the_whole_batch_vectors_loss_and_gradients(
    tiny_model_path, tokenizer, wines_csv, pooling_input, padding_side
):
    """Encoding each field in groups of similar length (each cut to its own longest text), or both
    fields in one call (``joint_fields``: the titles widened to the descriptions' columns, in one
    group or in groups drawn over both fields' texts) is one padded pass per field up to rounding:
    the same vectors in field and batch order, MLM loss and gradients, with the encoder called
    once a group. Left-padded fields keep every token's position."""
    batch = masked_wine_batch(wines_csv, tokenizer, rows=10)
    if padding_side == "left":
        batch = {name: tensor.flip(1) for name, tensor in batch.items()}
    model = dropout_free_metric_model(tiny_model_path)
    encoder_calls = []
    model.base_model.register_forward_hook(lambda module, inputs, output: encoder_calls.append(1))
    passes = 2 if pooling_input is PoolingInput.UNMASKED else 1
    results = {}
    for joint, groups in ((False, 1), (False, 3), (False, 16), (True, 1), (True, 3)):
        model.zero_grad()
        encoder_calls.clear()
        outputs = model(
            metric_batch=batch,
            fields=("title", "description"),
            pooling_input=pooling_input,
            length_groups=groups,
            joint_fields=joint,
        )
        (
            outputs["embeddings"][0].square().sum() + 2 * outputs["embeddings"][1].sum() + outputs["mlm_loss"]
        ).backward()
        gradients = [parameter.grad.clone() for parameter in model.parameters() if parameter.grad is not None]
        results[joint, groups] = (outputs["embeddings"].detach(), outputs["mlm_loss"].detach(), gradients)
        assert len(encoder_calls) == passes * min(groups, 10) * (1 if joint else 2)
    whole_embeddings, whole_loss, whole_gradients = results.pop((False, 1))
    assert whole_embeddings.shape == (2, 10, model.config.hidden_size)
    assert whole_loss > 0
    for embeddings, loss, gradients in results.values():
        torch.testing.assert_close(embeddings, whole_embeddings, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(loss, whole_loss)
        for gradient, whole_gradient in zip(gradients, whole_gradients, strict=True):
            torch.testing.assert_close(gradient, whole_gradient, atol=1e-5, rtol=1e-4)


def test_a_joint_pass_refuses_fields_with_different_tensors():
    title = {"input_ids": torch.ones(2, 3, dtype=torch.long), "attention_mask": torch.ones(2, 3)}
    description = {**title, "labels": torch.full((2, 3), -100)}
    with pytest.raises(ValueError, match="same tensors"):
        joined_fields([title, description])


def test_one_head_call_scores_the_masked_tokens_of_every_field_and_group(
    tiny_model_path, tokenizer, wines_csv
):
    """The vocabulary head runs once per pass, whatever the number of fields and length groups,
    so its weight gradient is computed once per step."""
    batch = masked_wine_batch(wines_csv, tokenizer, rows=10)
    model = dropout_free_metric_model(tiny_model_path)
    calls = []
    find_mlm_head(model).register_forward_hook(
        lambda module, inputs, output: calls.append(inputs[0].shape[0])
    )
    outputs = model(metric_batch=batch, fields=("title", "description"), length_groups=3)
    masked_tokens = sum(
        int((field_inputs(batch, name)["labels"] != -100).sum()) for name in ("title", "description")
    )
    assert calls == [masked_tokens]
    assert outputs["mlm_tokens"] == masked_tokens
