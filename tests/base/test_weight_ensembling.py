import pytest
import torch
from safetensors.torch import load_file

from metricbert_trainer.base.modeling import MASKED_LM_FOLDER, load_masked_lm, whole_copy
from metricbert_trainer.base.weight_ensembling import blend_with_start
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.metricbert.config import MetricBertConfig
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
            MetricBertConfig(output_dir=str(tmp_path), use_cpu=True, trained_weight_share=share)


def test_training_ends_halfway_between_start_and_trained_while_checkpoints_keep_the_trained_weights(
    tmp_path, tiny_model_path, tokenizer, wine_items
):
    """Two runs of one seed, one plain and one blended: the blended run's final encoder is the
    average of the start and the plain run's, its checkpoint holds the plain weights (so a resumed
    run goes on training them), and its card records the share."""

    def run(share: float, folder: str) -> MetricBertTrainer:
        args = MetricBertConfig(
            output_dir=str(tmp_path / folder),
            per_device_train_batch_size=16,
            learning_rate=1e-3,
            max_steps=3,
            save_strategy="steps",
            save_steps=3,
            report_to="none",
            seed=0,
            use_cpu=True,
            bf16=False,
            trained_weight_share=share,
        )
        trainer = MetricBertTrainer(
            load_masked_lm(tiny_model_path), args, train_dataset=wine_items, processing_class=tokenizer
        )
        trainer.train()
        trainer.save_model(args.output_dir)
        return trainer

    start = _encoder_weights(load_masked_lm(tiny_model_path))
    plain = _encoder_weights(run(1.0, "plain").model)
    blended_trainer = run(0.5, "blended")
    blended = _encoder_weights(blended_trainer.model)

    assert any(not torch.equal(plain[name], start[name]) for name in start)
    for name in start:
        torch.testing.assert_close(blended[name], 0.5 * plain[name] + 0.5 * start[name])
    # The masked-LM checkpoints (saved_layout), which resuming reads.
    checkpoint = load_file(tmp_path / "blended" / "checkpoint-3" / MASKED_LM_FOLDER / "model.safetensors")
    saved = load_file(tmp_path / "blended" / MASKED_LM_FOLDER / "model.safetensors")
    name = "bert.encoder.layer.0.attention.self.query.weight"
    torch.testing.assert_close(checkpoint[name], plain[name.removeprefix("bert.")])
    torch.testing.assert_close(saved[name], blended[name.removeprefix("bert.")])
    card = (tmp_path / "blended" / "README.md").read_text(encoding="utf-8")
    assert "trained_weight_share" in card and "0.5" in card
