import pytest
import torch
from conftest import bare_config
from safetensors.torch import load_file

from metricbert_trainer.base.modeling import MASKED_LM_FOLDER, load_masked_lm, whole_copy
from metricbert_trainer.base.weight_ensembling import blend_with_start
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.metricbert.trainer import MetricBertTrainer


@pytest.fixture(scope="module")
def wine_items(wines_csv):
    return load_catalog(wines_csv).dataset.select(range(64))


def _encoder_weights(model) -> dict[str, torch.Tensor]:
    return {name: parameter.detach().clone() for name, parameter in model.base_model.named_parameters()}


def test_blend_puts_every_weight_on_the_segment_between_start_and_trained(tiny_model_path):
    start = load_masked_lm(tiny_model_path).base_model
    trained = whole_copy(start)
    torch.manual_seed(1)
    with torch.no_grad():
        for parameter in trained.parameters():
            parameter.add_(torch.randn_like(parameter))
    before = {name: parameter.clone() for name, parameter in trained.named_parameters()}

    changed = blend_with_start(trained, start, trained_share=0.25)

    assert changed == len(before)
    for name, parameter in trained.named_parameters():
        expected = 0.25 * before[name] + 0.75 * dict(start.named_parameters())[name]
        torch.testing.assert_close(parameter, expected)


def test_a_share_of_one_changes_nothing_and_a_foreign_start_is_refused(tiny_model_path, minilm_path):
    encoder = load_masked_lm(tiny_model_path).base_model
    before = {name: parameter.clone() for name, parameter in encoder.named_parameters()}
    blend_with_start(encoder, whole_copy(encoder), trained_share=1.0)
    for name, parameter in encoder.named_parameters():
        assert torch.equal(parameter, before[name])
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        blend_with_start(encoder, whole_copy(encoder), trained_share=1.5)
    foreign = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="not a copy of this encoder"):
        blend_with_start(encoder, foreign, trained_share=0.5)


def test_the_config_refuses_shares_outside_zero_to_one(tmp_path):
    for share in (0.0, -0.5, 1.01):
        with pytest.raises(ValueError, match="trained_weight_share must be in \\(0, 1\\]"):
            bare_config(output_dir=str(tmp_path), use_cpu=True, trained_weight_share=share)


def test_training_ends_halfway_between_start_and_trained_while_checkpoints_keep_the_trained_weights(
    tmp_path, tiny_model_path, tokenizer, wine_items
):
    """A blended run's last checkpoint holds the trained weights (so a resumed run goes on
    training them), its final encoder is the average of those and the start, and its card records
    the share.

    Everything is compared within the one run, so the test checks the blending alone: a second
    run of the seed as the reference also tested bitwise reproducibility, and under Adam any float
    noise in a near-zero gradient becomes a step of the learning rate's size (that is how an
    order-free CPU gradient sum once failed this test; tests/base/test_embedding_lookup.py now
    pins the sum's order).
    """
    args = bare_config(
        output_dir=str(tmp_path),
        per_device_train_batch_size=16,
        learning_rate=1e-3,
        max_steps=3,
        save_strategy="steps",
        save_steps=3,
        report_to="none",
        seed=0,
        use_cpu=True,
        bf16=False,
        trained_weight_share=0.5,
    )
    start_model = load_masked_lm(tiny_model_path)
    start = {f"bert.{name}": weight for name, weight in _encoder_weights(start_model).items()}
    trainer = MetricBertTrainer(start_model, args, train_dataset=wine_items, processing_class=tokenizer)
    trainer.train()
    trainer.save_model(args.output_dir)

    trained = load_file(tmp_path / "checkpoint-3" / MASKED_LM_FOLDER / "model.safetensors")
    blended = {f"bert.{name}": weight for name, weight in _encoder_weights(trainer.model).items()}
    saved = load_file(tmp_path / MASKED_LM_FOLDER / "model.safetensors")
    assert any(not torch.equal(trained[name], start[name]) for name in start)
    for name in start:
        torch.testing.assert_close(blended[name], 0.5 * trained[name] + 0.5 * start[name])
        torch.testing.assert_close(saved[name], blended[name])
    card = (tmp_path / "README.md").read_text(encoding="utf-8")
    assert "trained_weight_share" in card and "0.5" in card
