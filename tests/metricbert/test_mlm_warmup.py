"""The MLM-head warm-up: only the head learns, and its MLM loss falls."""

import logging

import pytest
import torch
from conftest import bare_config, tiny_metricbert_trainer

from metricbert_trainer.base.modeling import find_mlm_head, load_masked_lm
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.metricbert.collator import MetricBertCollator
from metricbert_trainer.metricbert.mlm_warmup import (
    PROBE_BATCHES,
    frozen_masked_states,
    head_parameters,
)


def _trainer(tmp_path, model_path, tokenizer, items, **overrides):
    return tiny_metricbert_trainer(
        tmp_path / "out", model_path, tokenizer, items, mlm_weight=1.0, mlm_probability=0.15, **overrides
    )


@pytest.mark.parametrize("masked_tokens", [0, 300])
def test_warm_up_trains_the_head_alone_and_lowers_its_mlm_loss(
    tmp_path, tiny_model_path, tokenizer, wines_csv, masked_tokens
):
    items = load_catalog(wines_csv).dataset.select(range(128))
    trainer = _trainer(
        tmp_path,
        tiny_model_path,
        tokenizer,
        items,
        mlm_head_warmup_steps=40,
        mlm_head_warmup_learning_rate=1e-2,
        mlm_head_warmup_masked_tokens=masked_tokens,
    )
    encoder_before = {name: value.clone() for name, value in trainer.model.base_model.state_dict().items()}
    head_before = [parameter.detach().clone() for parameter in head_parameters(trainer.model)]
    trainer.args.max_steps = 0  # the warm-up alone: no joint step
    trainer.args.num_train_epochs = 0
    trainer.train()
    warmup = trainer.mlm_head_warmup
    assert warmup.steps == 40 and warmup.loss_after < warmup.loss_before - 0.3, warmup
    for name, value in trainer.model.base_model.state_dict().items():
        assert torch.equal(value, encoder_before[name]), name  # the tied decoder included
    changed = [
        not torch.equal(a, b.detach())
        for a, b in zip(head_before, head_parameters(trainer.model), strict=True)
    ]
    assert all(changed)
    assert "MLM loss" in trainer.objective_card_section()


def _warm_up_alone(trainer) -> list[bool]:
    """Runs ``trainer``'s warm-up without a joint step; the training mode of each encoder call."""
    modes = []
    hook = trainer.model.base_model.register_forward_hook(
        lambda module, args, output: modes.append(module.training)
    )
    trainer.args.max_steps = 0
    trainer.args.num_train_epochs = 0
    trainer.train()
    hook.remove()
    return modes


def _budget_trainer(folder, tiny_model_path, tokenizer, wines_csv, steps: int, masked_tokens: int):
    """The tiny model's trainer on 96 wines whose warm-up runs ``steps`` steps on ``masked_tokens``."""
    items = load_catalog(wines_csv).dataset.select(range(96))
    return _trainer(
        folder,
        tiny_model_path,
        tokenizer,
        items,
        mlm_head_warmup_steps=steps,
        mlm_head_warmup_masked_tokens=masked_tokens,
        length_groups=2,
    )


def test_batches_are_encoded_once_dropout_on_in_length_groups_until_the_token_budget(
    tmp_path, tiny_model_path, tokenizer, wines_csv
):
    trainer = _budget_trainer(tmp_path, tiny_model_path, tokenizer, wines_csv, steps=12, masked_tokens=500)
    trainer.model.eval()
    modes = _warm_up_alone(trainer)
    warmup = trainer.mlm_head_warmup
    # A batch of 16 wines holds about 160 masked tokens: the budget takes several, and stops at the
    # first that reaches it.
    assert 1 < warmup.encoded_batches < 12 and warmup.encoded_tokens >= 500
    # (probe batches + encoded ones) x 2 fields x 2 length groups, all before the 12 head steps, all
    # with dropout on, as the joint steps whose states the head then reads.
    assert modes == [True] * (PROBE_BATCHES + warmup.encoded_batches) * 2 * 2
    assert trainer.model.training is False  # given back
    assert (
        f"on the states of {warmup.encoded_batches} batches encoded once ({warmup.encoded_tokens} masked tokens)"
        in trainer.objective_card_section()
    )
    smaller = _budget_trainer(
        tmp_path / "smaller", tiny_model_path, tokenizer, wines_csv, steps=12, masked_tokens=150
    )
    _warm_up_alone(smaller)
    assert smaller.mlm_head_warmup.encoded_batches < warmup.encoded_batches


def test_the_budget_is_encoded_with_attention_dropout_off(tmp_path, tiny_model_path, tokenizer, wines_csv):
    trainer = _budget_trainer(tmp_path, tiny_model_path, tokenizer, wines_csv, steps=4, masked_tokens=300)
    attention = [module for module in trainer.model.modules() if type(module).__name__ == "BertSelfAttention"]
    modes = []
    hook = attention[0].register_forward_hook(lambda module, args, output: modes.append(module.training))
    _warm_up_alone(trainer)
    hook.remove()
    # Every encoding pass (probes and budget: 2 fields x 2 length groups each) with it off, while the
    # rest of the encoder is in train mode (test_batches_are_encoded_once_dropout_on_...).
    assert len(modes) == (PROBE_BATCHES + trainer.mlm_head_warmup.encoded_batches) * 2 * 2 and not any(modes)


def test_a_budget_beyond_the_steps_encodes_one_batch_per_step(
    tmp_path, tiny_model_path, tokenizer, wines_csv
):
    trainer = _budget_trainer(tmp_path, tiny_model_path, tokenizer, wines_csv, steps=3, masked_tokens=10**9)
    modes = _warm_up_alone(trainer)
    assert trainer.mlm_head_warmup.encoded_batches == 3
    # (probe batches + 3) x 2 fields x 2 length groups: once each, not again at every step.
    assert len(modes) == (PROBE_BATCHES + 3) * 2 * 2


def test_each_step_trains_on_the_drawn_number_of_masked_tokens(
    tmp_path, tiny_model_path, tokenizer, wines_csv
):
    trainer = _budget_trainer(tmp_path, tiny_model_path, tokenizer, wines_csv, steps=5, masked_tokens=400)
    trainer.args.mlm_head_warmup_tokens_per_step = 48
    rows = []
    hook = find_mlm_head(trainer.model).register_forward_hook(
        lambda module, args, output: rows.append(args[0].shape[0])
    )
    _warm_up_alone(trainer)
    hook.remove()
    # The probes' loss before, with the word prior, after (PROBE_BATCHES each, a whole batch's masked
    # tokens); between them the 5 steps, 48 tokens each, out of the 400 or more encoded.
    probes = PROBE_BATCHES
    assert rows[2 * probes : -probes] == [48] * 5
    assert all(count > 48 for count in rows[:probes]) and trainer.mlm_head_warmup.encoded_tokens >= 400


@pytest.mark.parametrize("word_prior", [True, False])
def test_the_word_prior_is_set_before_the_first_step(
    tmp_path, tiny_model_path, tokenizer, wines_csv, word_prior
):
    trainer = _budget_trainer(tmp_path, tiny_model_path, tokenizer, wines_csv, steps=1, masked_tokens=300)
    trainer.args.mlm_head_warmup_word_prior = word_prior
    _warm_up_alone(trainer)
    warmup = trainer.mlm_head_warmup
    if word_prior:
        # The tiny random encoder's states say little; the catalog's word frequencies say a lot.
        assert warmup.loss_with_prior < warmup.loss_before - 2, warmup
        assert "with the catalog's word prior as output bias" in trainer.objective_card_section()
    else:
        assert warmup.loss_with_prior is None
        assert "word prior" not in trainer.objective_card_section()


def test_masked_states_in_length_groups_are_those_of_one_padded_batch(tiny_model_path, tokenizer, wines_csv):
    items = load_catalog(wines_csv).dataset.select(range(16))
    model = load_masked_lm(tiny_model_path).eval()
    collator = MetricBertCollator(tokenizer, max_length=64, mlm_probability=0.3, seed=0)
    batch = collator([dict(item) for item in items])
    with torch.no_grad():
        whole, whole_labels = frozen_masked_states(model, batch, ("title", "description"))
        grouped, grouped_labels = frozen_masked_states(
            model, batch, ("title", "description"), length_groups=4
        )
    # The groups put the rows in length order: compare as multisets of (label, state) rows.
    assert len(grouped_labels) == len(whole_labels) > 0
    for (label, total), (other_label, other_total) in zip(
        _label_ordered(whole_labels, whole), _label_ordered(grouped_labels, grouped), strict=True
    ):
        assert label == other_label and abs(total - other_total) < 1e-3


def _label_ordered(labels, states):
    return sorted(zip(labels.tolist(), states.sum(dim=1).tolist(), strict=True))


def test_warm_up_says_when_it_starts_and_ends_and_draws_a_bar_of_its_steps(
    tmp_path, tiny_model_path, tokenizer, wines_csv, caplog, capfd
):
    """Before the training loop's own bar, the warm-up can take minutes: it must not look like a hang."""
    items = load_catalog(wines_csv).dataset.select(range(64))
    trainer = _trainer(tmp_path, tiny_model_path, tokenizer, items, mlm_head_warmup_steps=5)
    trainer.args.max_steps = 0  # the warm-up alone: no joint step
    trainer.args.num_train_epochs = 0
    caplog.set_level(logging.INFO, logger="metricbert_trainer")
    trainer.train()
    messages = [record.getMessage() for record in caplog.records]
    started = messages.index("MLM-head warm-up: training the head alone for 5 steps, the encoder frozen.")
    assert any(message.startswith("MLM-head warm-up, 5 steps in ") for message in messages[started + 1 :])
    bar = capfd.readouterr().err
    assert "MLM-head warm-up: 100%" in bar and "5/5" in bar


def test_mlm_weight_ramps_up_over_the_first_steps(tmp_path, tiny_model_path, tokenizer, wines_csv):
    items = load_catalog(wines_csv).dataset.select(range(32))
    trainer = _trainer(tmp_path, tiny_model_path, tokenizer, items, mlm_weight_ramp_steps=4)
    weights = []
    for step in range(6):
        trainer.state.global_step = step
        weights.append(trainer.current_mlm_weight)
    assert weights == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]


@pytest.mark.parametrize(
    "options, message",
    [
        (
            {
                "mlm_weight": 1,
                "mlm_probability": 0.15,
                "mlm_head_warmup_steps": 4,
                "mlm_head_warmup_masked_tokens": -1,
            },
            ">= 0",
        ),
        ({"mlm_head_warmup_steps": -1}, ">= 0"),
        ({"mlm_weight": 1, "mlm_probability": 0.15, "mlm_head_warmup_learning_rate": 0}, "learning_rate"),
        ({"distill_weight": -1}, "distill_weight"),
        ({"distill_temperature": 0}, "distill_temperature"),
    ],
)
def test_new_options_out_of_range_are_refused(tmp_path, options, message):
    with pytest.raises(ValueError, match=message):
        bare_config(output_dir=str(tmp_path), report_to="none", use_cpu=True, **options)
