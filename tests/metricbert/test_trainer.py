import collections
import contextlib
import json
import traceback
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import bare_config, intra_op_threads
from transformers import AutoModel, AutoModelForMaskedLM, TrainerCallback

from metricbert_trainer.base.bernoulli_masks import mask_kernel
from metricbert_trainer.base.dropout_masks import ATTENTION_NAME
from metricbert_trainer.base.modeling import load_masked_lm
from metricbert_trainer.base.pooling import mean_pool
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.metricbert.collator import MetricBertCollator
from metricbert_trainer.metricbert.trainer import MetricBertTrainer
from metricbert_trainer.training.trainer import CatalogTrainer


@pytest.fixture(scope="module")
def wine_items(wines_csv):
    return load_catalog(wines_csv).dataset.select(range(64))


def _config(tmp_path, **overrides):
    values = dict(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=16,
        learning_rate=1e-3,
        num_train_epochs=1,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=0,
        margin=0.2,
        use_cpu=True,
        distill_weight=0.0,  # these tests study the triplet term; the guard has tests of its own
    )
    values.update(overrides)
    return bare_config(**values)


def _trained(tmp_path, model_path, tokenizer, items, **overrides):
    """A run of ``_config(tmp_path, **overrides)`` on ``items`` from the model at ``model_path``, trained."""
    trainer = MetricBertTrainer(
        load_masked_lm(model_path),
        _config(tmp_path, **overrides),
        train_dataset=items,
        processing_class=tokenizer,
    )
    trainer.train()
    return trainer


def _differing_weights(first, second) -> list[str]:
    """The parameters whose values differ between two trained models, by name."""
    weights = [dict(trainer.model.named_parameters()) for trainer in (first, second)]
    assert weights[0].keys() == weights[1].keys()
    return [name for name in weights[0] if not torch.equal(weights[0][name], weights[1][name])]


def _loss_history(trainer, name):
    return [entry[name] for entry in trainer.state.log_history if name in entry]


def test_triplet_loss_falls_and_terms_are_logged(tmp_path, tiny_model_path, tokenizer, wine_items):
    # Random negatives: hard ones make a randomly initialised encoder collapse (see the next test).
    args = _config(
        tmp_path,
        num_train_epochs=10,
        mlm_weight=0.1,
        mlm_probability=0.15,
        learning_rate=5e-3,
        mining="random",
    )
    trainer = MetricBertTrainer(
        load_masked_lm(tiny_model_path), args, train_dataset=wine_items, processing_class=tokenizer
    )
    trainer.train()
    triplet = _loss_history(trainer, "triplet_loss")
    assert len(triplet) == 40
    assert np.mean(triplet[-4:]) < 0.5 * np.mean(triplet[:4]), triplet
    logged = trainer.state.log_history[0]
    for key in (
        "loss",
        "mlm_loss",
        "margin_violation_rate",
        "negative_closer_rate",
        "mean_d_ap",
        "mean_d_an",
        "embedding_spread",
    ):
        assert key in logged, key
    # The untrained tiny head starts near ln(vocabulary size).
    assert abs(logged["mlm_loss"] - np.log(tokenizer.vocab_size)) < 1.5


def test_collapse_is_detected_and_warned(tmp_path, tiny_model_path, tokenizer, wine_items, caplog):
    # Unfiltered hard negatives from a random start: the trivial solution (all embeddings equal, loss = margin).
    args = _config(tmp_path, num_train_epochs=6, false_negative_filter=False, learning_rate=3e-3)
    trainer = MetricBertTrainer(
        load_masked_lm(tiny_model_path), args, train_dataset=wine_items, processing_class=tokenizer
    )
    with caplog.at_level("WARNING", logger="metricbert_trainer.metricbert.collapse_warning"):
        trainer.train()
    spread = _loss_history(trainer, "embedding_spread")
    assert spread[-1] < 0.5 * spread[0]
    assert any("collapsing" in record.getMessage() for record in caplog.records)


def test_loss_is_weighted_sum_of_terms(tmp_path, tiny_model_path, tokenizer, wine_items):
    args = _config(tmp_path, triplet_weight=2.0, mlm_weight=0.5, mlm_probability=0.15, learning_rate=0.0)
    trainer = MetricBertTrainer(
        load_masked_lm(tiny_model_path), args, train_dataset=wine_items, processing_class=tokenizer
    )
    trainer.train()
    entry = trainer.state.log_history[0]
    assert entry["loss"] == pytest.approx(0.5 * entry["mlm_loss"] + 2.0 * entry["triplet_loss"], rel=1e-3)


def test_text_columns_reach_the_collator_and_dropping_them_is_refused(
    tmp_path, tiny_model_path, tokenizer, wine_items
):
    """transformers would drop the columns the model's forward does not name, the text columns
    included: the config keeps them (``remove_unused_columns`` false) and refuses to drop them."""
    with pytest.raises(ValueError, match="remove_unused_columns"):
        _config(tmp_path, remove_unused_columns=True)
    args = _config(tmp_path, max_steps=1, mlm_weight=1.0, mlm_probability=0.15)
    trainer = MetricBertTrainer(
        load_masked_lm(tiny_model_path), args, train_dataset=wine_items, processing_class=tokenizer
    )
    batch = next(iter(trainer.get_train_dataloader()))
    assert "title_input_ids" in batch and "description_labels" in batch


def test_gradient_accumulation_averages_micro_batches(tmp_path, tiny_model_path, tokenizer, wine_items):
    """Two accumulated micro-batches give the gradient of the mean of their two losses."""
    torch.manual_seed(0)
    collator = MetricBertCollator(tokenizer, max_length=32)
    micro_batches = [collator(list(wine_items.select(range(start, start + 8)))) for start in (0, 8)]
    args = _config(tmp_path, gradient_accumulation_steps=2, mlm_weight=1.0, mlm_probability=0.15)
    model = load_masked_lm(tiny_model_path, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    trainer = MetricBertTrainer(model, args, train_dataset=wine_items, processing_class=tokenizer)
    trainer.current_gradient_accumulation_steps = 2
    model.train()
    for batch in micro_batches:
        trainer.training_step(model, batch)
    accumulated = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}

    model.zero_grad()
    losses = [trainer.compute_loss(model, batch) for batch in micro_batches]
    ((losses[0] + losses[1]) / 2).backward()
    for name, parameter in model.named_parameters():
        if parameter.grad is not None:
            torch.testing.assert_close(accumulated[name], parameter.grad, rtol=1e-4, atol=1e-6)


def test_saved_checkpoint_reloads_to_identical_embeddings(tmp_path, tiny_model_path, tokenizer, wine_items):
    args = _config(tmp_path, max_steps=2)
    trainer = MetricBertTrainer(
        load_masked_lm(tiny_model_path), args, train_dataset=wine_items, processing_class=tokenizer
    )
    trainer.train()
    trainer.save_model(args.output_dir)
    inputs = tokenizer(wine_items["description"][:4], padding=True, return_tensors="pt")

    def embed(model):
        model.eval()
        with torch.no_grad():
            return mean_pool(model.base_model(**inputs).last_hidden_state, inputs["attention_mask"])

    trained = embed(trainer.model)
    torch.testing.assert_close(embed(AutoModel.from_pretrained(args.output_dir)), trained)
    torch.testing.assert_close(embed(AutoModelForMaskedLM.from_pretrained(args.output_dir)), trained)


def test_false_negative_filter_never_mines_what_the_starting_model_ranks_above_the_positive(
    tmp_path, tiny_model_path, tokenizer, wine_items
):
    args = _config(tmp_path, max_steps=3, false_negative_filter=True)
    trainer = MetricBertTrainer(
        load_masked_lm(tiny_model_path), args, train_dataset=wine_items, processing_class=tokenizer
    )
    trainer.train()
    assert _loss_history(trainer, "guide_negative_closer_rate") == [0.0, 0.0, 0.0]
    assert all(rate > 0 for rate in _loss_history(trainer, "filtered_candidate_rate"))

    unfiltered = MetricBertTrainer(
        load_masked_lm(tiny_model_path),
        _config(tmp_path, max_steps=1, false_negative_filter=False),
        train_dataset=wine_items,
        processing_class=tokenizer,
    )
    unfiltered.train()
    # Without the filter, hard mining picks exactly those suspects on a homogeneous catalog.
    assert _loss_history(unfiltered, "guide_negative_closer_rate")[0] > 0.5

    widened = MetricBertTrainer(
        load_masked_lm(tiny_model_path),
        _config(tmp_path, max_steps=3, false_negative_filter=True, false_negative_margin=0.05),
        train_dataset=wine_items,
        processing_class=tokenizer,
    )
    widened.train()
    # The same batches (same seed): a margin filters every candidate the plain filter did, and more.
    margins = zip(
        _loss_history(widened, "filtered_candidate_rate"),
        _loss_history(trainer, "filtered_candidate_rate"),
        strict=True,
    )
    assert all(with_margin > without for with_margin, without in margins)


def test_ranking_metrics_drive_best_model_and_early_stopping(
    tmp_path, tiny_model_path, tokenizer, wine_items
):
    from transformers import EarlyStoppingCallback

    from metricbert_trainer.data.annotations import Annotations
    from metricbert_trainer.data.catalog import load_catalog
    from metricbert_trainer.evaluation.evaluator import RankingEvaluator

    catalog = load_catalog(wine_items)
    annotations = Annotations({0: (1, 2, 3), 10: (11, 12), 20: (21, 22, 23)}, source="hand-made")
    args = _config(
        tmp_path,
        num_train_epochs=20,
        eval_strategy="steps",
        eval_steps=1,
        save_strategy="steps",
        save_steps=1,
        metric_for_best_model="mpr",
        greater_is_better=True,
        load_best_model_at_end=True,
        learning_rate=0.0,  # nothing changes, so the metric never improves and training stops early
    )
    trainer = MetricBertTrainer(
        load_masked_lm(tiny_model_path),
        args,
        train_dataset=wine_items,
        processing_class=tokenizer,
        ranking_evaluator=RankingEvaluator(catalog, annotations, max_length=32),
        callbacks=[EarlyStoppingCallback(early_stopping_patience=2)],
    )
    trainer.train()
    evaluations = [entry for entry in trainer.state.log_history if "eval_mpr" in entry]
    assert {"eval_mrr", "eval_hr@10", "eval_hr@100", "eval_raw_mpr"} <= set(evaluations[0])
    assert trainer.state.global_step == 3  # stopped after 2 evaluations without improvement
    assert trainer.state.best_metric == evaluations[0]["eval_mpr"]
    assert trainer.state.best_model_checkpoint.endswith("checkpoint-1")


def test_every_evaluation_says_what_it_ranks_and_how_long_it_took(
    tmp_path, tiny_model_path, tokenizer, wine_items, caplog
):
    """eval_on_start and the final evaluation encode the catalog before and after the loop's own
    bar: each says what it does (items, views, seeds, held-out items) and when it is done."""
    from metricbert_trainer.data.annotations import Annotations
    from metricbert_trainer.evaluation.evaluator import RankingEvaluator, SequentialEvaluator
    from metricbert_trainer.evaluation.label_free import LabelFreeEvaluator

    catalog = load_catalog(wine_items)
    annotations = Annotations({0: (1, 2, 3), 10: (11, 12)}, source="hand-made")
    model = load_masked_lm(tiny_model_path)
    caplog.set_level("INFO", logger="metricbert_trainer")
    evaluator = SequentialEvaluator(
        [
            RankingEvaluator(catalog, annotations, max_length=32),
            LabelFreeEvaluator.from_start(model, tokenizer, catalog, list(range(40, 64)), max_length=32),
        ]
    )
    args = _config(tmp_path, max_steps=1, eval_strategy="steps", eval_steps=1, eval_on_start=True)
    trainer = MetricBertTrainer(
        model, args, train_dataset=wine_items, processing_class=tokenizer, ranking_evaluator=evaluator
    )
    trainer.train()
    messages = [record.getMessage() for record in caplog.records]
    assert "Label-free signals: the starting model's neighbourhoods of 24 held-out items." in messages
    what = "ranking 64 items (2 text views) from 2 annotated seeds; label-free signals on 24 held-out items"
    for step in (0, 1):
        started = messages.index(f"Evaluation at step {step}: {what}.")
        assert messages[started + 1].startswith(f"Evaluation at step {step} done in ")


@pytest.mark.parametrize(
    ("objective", "overrides"),
    [
        ("contrastive", {}),
        ("cosine", {}),
        ("mnrl", {}),
        ("logistic_triplet", {}),
        ("triplet", {"distance": "euclidean", "margin": 1.0}),
    ],
)
def test_every_objective_trains_logs_its_term_and_reaches_the_model_card(
    tmp_path, tiny_model_path, tokenizer, wine_items, objective, overrides
):
    args = _config(tmp_path, objective=objective, num_train_epochs=5, learning_rate=3e-3, **overrides)
    trainer = MetricBertTrainer(
        load_masked_lm(tiny_model_path), args, train_dataset=wine_items, processing_class=tokenizer
    )
    trainer.train()
    term = _loss_history(trainer, f"{objective}_loss")
    assert len(term) == 20 and all(np.isfinite(term))
    assert np.mean(term[-4:]) < np.mean(term[:4]), term
    assert trainer.state.log_history[0]["loss"] == pytest.approx(term[0], rel=1e-4)
    trainer.create_model_card()
    card = (tmp_path / "out" / "README.md").read_text(encoding="utf-8")
    recorded = json.loads(card.split("## MetricBERT objective")[1].split("```json")[1].split("```")[0])
    assert recorded == {**args.loss_config(), **trainer.metric_loss.get_config_dict()}
    assert recorded["objective"] == objective


def test_a_loss_given_to_the_trainer_replaces_the_configured_one(
    tmp_path, tiny_model_path, tokenizer, wine_items
):
    """As with sentence-transformers' and trl's trainers, the loss may come as an object; the
    card then records its settings rather than the ones ``args`` would have built."""
    from metricbert_trainer.metricbert.losses import ContrastiveLoss

    loss = ContrastiveLoss(mining="random", negative_margin=0.25)
    args = _config(tmp_path, max_steps=2)  # args configure the triplet loss
    trainer = MetricBertTrainer(
        load_masked_lm(tiny_model_path), args, train_dataset=wine_items, processing_class=tokenizer, loss=loss
    )
    assert trainer.metric_loss is loss
    trainer.train()
    assert len(_loss_history(trainer, "contrastive_loss")) == 2 and not _loss_history(trainer, "triplet_loss")
    trainer.create_model_card()
    card = (tmp_path / "out" / "README.md").read_text(encoding="utf-8")
    recorded = json.loads(card.split("## MetricBERT objective")[1].split("```json")[1].split("```")[0])
    assert recorded["objective"] == "contrastive" and recorded["mining"] == "random"
    assert recorded["negative_margin"] == 0.25 and recorded["triplet_weight"] == args.triplet_weight


def test_guide_confidence_weighting_logs_the_anchor_weight_and_weakens_the_guard(
    tmp_path, tiny_model_path, tokenizer, wine_items
):
    """The same first step, guarded uniformly, by the guide's confidence and by its square: the
    weights are probabilities, so each weighted guard's loss can only be smaller, the squared
    one's smaller still."""
    first_steps = {}
    for name, weighting, power in (
        ("uniform", "uniform", 1.0),
        ("confidence", "guide_confidence", 1.0),
        ("squared", "guide_confidence", 2.0),
    ):
        args = _config(
            tmp_path / name,
            max_steps=1,
            distill_weight=1.0,
            distill_weighting=weighting,
            distill_confidence_power=power,
        )
        trainer = MetricBertTrainer(
            load_masked_lm(tiny_model_path), args, train_dataset=wine_items, processing_class=tokenizer
        )
        trainer.train()
        first_steps[name] = trainer.state.log_history[0]
    uniform, weighted, squared = first_steps["uniform"], first_steps["confidence"], first_steps["squared"]
    assert "distill_anchor_weight" not in uniform
    assert 0.0 < squared["distill_anchor_weight"] < weighted["distill_anchor_weight"] < 1.0
    assert 0.0 < squared["distill_loss"] < weighted["distill_loss"] < uniform["distill_loss"]


def test_length_groups_and_one_call_for_both_fields_train_like_one_padded_batch(
    tmp_path, tiny_model_path, tokenizer, wine_items
):
    """Each field encoded in groups of similar length, or both fields in one encoder call
    (``joint_field_pass``, in one group or in groups drawn over both fields' texts), gives the
    vectors of one padded batch per field, so a run logs the same losses up to rounding (without
    dropout, whose draws follow the shapes of the tensors), with the encoder called once a group."""
    histories, calls = {}, {}
    for groups, joint in ((1, False), (4, False), (1, True), (4, True)):
        args = _config(
            tmp_path / f"{groups}-{joint}",
            max_steps=3,
            mlm_weight=1.0,
            mlm_probability=0.15,
            length_groups=groups,
            joint_field_pass=joint,
        )
        model = load_masked_lm(tiny_model_path, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        calls[groups, joint] = []
        model.base_model.register_forward_hook(
            lambda module, inputs, output, key=(groups, joint): calls[key].append(module.training)
        )
        trainer = MetricBertTrainer(model, args, train_dataset=wine_items, processing_class=tokenizer)
        trainer.train()
        histories[groups, joint] = _loss_history(trainer, "triplet_loss") + _loss_history(trainer, "mlm_loss")
    assert len(histories[1, False]) == 6
    for key in ((4, False), (1, True), (4, True)):
        np.testing.assert_allclose(histories[key], histories[1, False], rtol=1e-4, atol=1e-6)
    assert {key: sum(made) for key, made in calls.items()} == {
        (1, False): 3 * 2,
        (4, False): 3 * 2 * 4,
        (1, True): 3,
        (4, True): 3 * 4,
    }


@pytest.mark.parametrize("checkpointing", [False, True])
def test_attention_dropout_off_trains_like_a_model_configured_without_it(
    tmp_path, tiny_model_path, tokenizer, wine_items, checkpointing
):
    """``attention_dropout: false`` leaves the attention probabilities' dropout off the training
    steps only: a model configured with it at 0.5 then logs the losses and ends with the weights of
    one configured at 0, the self-attention blocks run in eval mode inside the steps (the forward
    that gradient checkpointing runs again in the backward pass included) and are in train mode
    again after them, and the saved configuration keeps its 0.5. With the option on, the same
    model logs other losses (the dropout is drawn)."""
    histories, modes, weights = {}, {}, {}
    for name, probability, attention_dropout in (
        ("configured without it", 0.0, True),
        ("left off", 0.5, False),
        ("drawn", 0.5, True),
    ):
        model = load_masked_lm(
            tiny_model_path, hidden_dropout_prob=0.0, attention_probs_dropout_prob=probability
        )
        attention = [module for module in model.modules() if type(module).__name__ == "BertSelfAttention"]
        modes[name] = []
        # The guide and the teacher are frozen copies, hooks included: only the student's blocks count.
        student = {id(module) for module in attention}
        for module in attention:
            module.register_forward_hook(
                lambda module, inputs, output, name=name, student=student: (
                    modes[name].append(module.training) if id(module) in student else None
                )
            )
        args = _config(
            tmp_path / name.replace(" ", "-"),
            max_steps=3,
            mlm_weight=1.0,
            mlm_probability=0.15,
            mlm_head_warmup_steps=0,  # its encoding leaves the attention dropout off in every run
            attention_dropout=attention_dropout,
            activation_checkpointing=checkpointing,
        )
        trainer = MetricBertTrainer(model, args, train_dataset=wine_items, processing_class=tokenizer)
        trainer.train()
        histories[name] = _loss_history(trainer, "triplet_loss") + _loss_history(trainer, "mlm_loss")
        weights[name] = trainer.model.state_dict()
        if name == "left off":
            assert all(module.training == model.training for module in attention)
            assert model.config.attention_probs_dropout_prob == 0.5
    assert histories["left off"] == histories["configured without it"]
    assert all(
        torch.equal(weights["left off"][key], weights["configured without it"][key])
        for key in weights["left off"]
    )
    assert histories["drawn"] != histories["configured without it"]
    assert modes["left off"] and not any(modes["left off"])
    assert modes["drawn"] and all(modes["drawn"])


def test_activation_checkpointing_draws_the_kernels_masks_again_in_its_recomputed_forward(
    tmp_path, tiny_model_path, tokenizer, wine_items
):
    """Activation checkpointing runs each layer's forward again in the backward pass, after restoring
    the generator's state: the kernel, which reads and writes that state, draws the same masks again
    (the same weights as without checkpointing, up to rounding); after training the model has its
    own dropout modules and attention function back."""
    runs = [
        _trained(
            tmp_path / str(checkpointing),
            tiny_model_path,
            tokenizer,
            wine_items,
            max_steps=3,
            mlm_weight=1.0,
            mlm_probability=0.15,
            mlm_head_warmup_steps=1,
            activation_checkpointing=checkpointing,
        )
        for checkpointing in (False, True)
    ]
    histories = [_loss_history(trainer, "mlm_loss") for trainer in runs]
    assert histories[1] == pytest.approx(histories[0], rel=1e-5)
    plain, checkpointed = (dict(trainer.model.named_parameters()) for trainer in runs)
    assert all(torch.allclose(plain[name], checkpointed[name], atol=1e-5) for name in plain)
    for trainer in runs:
        assert trainer.model.config._attn_implementation == "sdpa"
        assert any(type(module) is torch.nn.Dropout for module in trainer.model.modules())


def test_the_default_cpu_masks_train_to_pytorchs_own_weights_bit_for_bit(
    tmp_path, tiny_model_path, tokenizer, wine_items, monkeypatch
):
    """On a CPU the trainer draws its dropout masks from the compiled kernel (the model's attention
    function is the kernel's during every step) and ends with the weights, losses and generator
    state that PyTorch's own dropout gives: the masks and the arithmetic are PyTorch's."""
    attention_seen: set[str] = set()

    class AttentionSeen(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            attention_seen.add(model.config._attn_implementation)

    settings = dict(max_steps=3, mlm_weight=1.0, mlm_probability=0.15, mlm_head_warmup_steps=1, bf16=True)
    drawn = MetricBertTrainer(
        load_masked_lm(tiny_model_path),
        _config(tmp_path / "drawn", **settings),
        train_dataset=wine_items,
        processing_class=tokenizer,
        callbacks=[AttentionSeen()],
    )
    drawn.train()
    after_drawn = torch.get_rng_state()
    assert attention_seen == {ATTENTION_NAME} and mask_kernel() is not None
    monkeypatch.setattr(CatalogTrainer, "cpu_dropout_masks", lambda self: contextlib.nullcontext())
    own = _trained(tmp_path / "own", tiny_model_path, tokenizer, wine_items, **settings)
    assert _differing_weights(drawn, own) == []
    assert _loss_history(drawn, "loss") == _loss_history(own, "loss")
    assert torch.equal(torch.get_rng_state(), after_drawn)
    assert drawn.model.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("groups", [1, 4])
def test_two_runs_of_one_seed_end_with_the_same_weights_bit_for_bit(
    tmp_path, tiny_model_path, tokenizer, wine_items, groups
):
    """Same seed, same weights, on two threads too: a gradient summed in thread order would differ
    in its last bits, and Adam makes a near-zero gradient's noise a full step (the shared word
    embedding lookup once indexed its rows, whose CPU backward has no fixed order)."""
    with intra_op_threads(2):
        runs = [
            _trained(
                tmp_path / str(run),
                tiny_model_path,
                tokenizer,
                wine_items,
                max_steps=4,
                mlm_weight=1.0,
                mlm_probability=0.15,
                mlm_head_warmup_steps=1,
                distill_weight=1.0,
                length_groups=groups,
            )
            for run in range(2)
        ]
    assert _differing_weights(*runs) == []


def test_worker_processes_collate_the_batches_a_run_without_them_trains_on(
    tmp_path, tiny_model_path, tokenizer, wine_items
):
    """On a GPU the batches are better collated in worker processes (``dataloader_num_workers``),
    off the host thread that launches the step. They must be the same batches: masks drawn from
    each batch's texts, not from a random state that each worker holds a copy of, and the
    neighbourhoods' sampler read by the main process over two epochs."""
    runs = [
        _trained(
            tmp_path / str(workers),
            tiny_model_path,
            tokenizer,
            wine_items,
            num_train_epochs=2,
            mlm_weight=1.0,
            mlm_probability=0.15,
            distill_weight=1.0,
            batch_neighbourhood_size=4,
            teacher_weight=1.0,
            teacher_shared_neighbours=5,
            dataloader_num_workers=workers,
        )
        for workers in (0, 2)
    ]
    losses = [_loss_history(trainer, "loss") for trainer in runs]
    assert len(losses[0]) == 8 and losses[0] == losses[1]
    assert _differing_weights(*runs) == []


def test_the_guide_cache_trains_like_the_guides_forward(tmp_path, tiny_model_path, tokenizer, wine_items):
    """With ``guide_embedding_cache`` the guide encodes the catalog once and each step looks its
    vectors up: the filter, the guard and the diagnostics see the same vectors, so the run logs
    the same losses and mining statistics as one that runs the guide's forward every step, and
    so does a cache held in float16, whose card says so. A run that draws fewer items than the
    catalog holds builds none."""
    histories = {}
    for cache, dtype in ((False, "float32"), (True, "float32"), (True, "float16")):
        args = _config(  # 4 steps of 16: the 64 items once, so the cache pays and is built
            tmp_path / f"{cache}-{dtype}",
            max_steps=4,
            distill_weight=1.0,
            max_length=24,
            guide_embedding_cache=cache,
            guide_embedding_cache_dtype=dtype,
        )
        trainer = MetricBertTrainer(
            load_masked_lm(tiny_model_path), args, train_dataset=wine_items, processing_class=tokenizer
        )
        trainer.train()
        assert trainer.guide.cached_texts == (2 * len(wine_items) if cache else 0)
        if cache:
            assert trainer.guide.cache_matrix().dtype == getattr(torch, dtype)
        # Cards name the format only when it is not the default's.
        assert args.loss_config().get("guide_embedding_cache_dtype") == (
            "float16" if dtype == "float16" else None
        )
        histories[cache, dtype] = trainer.state.log_history
    names = ("triplet_loss", "distill_loss", "filtered_candidate_rate", "guide_negative_closer_rate")
    for run, tolerance in ((True, "float32"), 1e-3), ((True, "float16"), 1e-2):
        for plain, cached in zip(histories[False, "float32"][:-1], histories[run][:-1], strict=True):
            for name in names:
                assert cached[name] == pytest.approx(plain[name], rel=tolerance, abs=1e-4), (run, name)

    # Three steps draw 48 of the 64 items: the pass over all 64 would cost more than it saves.
    short = MetricBertTrainer(
        load_masked_lm(tiny_model_path),
        _config(tmp_path / "short", max_steps=3, distill_weight=1.0, max_length=24),
        train_dataset=wine_items,
        processing_class=tokenizer,
    )
    short.train()
    assert short.guide.cached_texts == 0


def test_a_cache_format_without_the_cache_is_refused(tmp_path):
    """A float16 cache with the cache off would hold nothing: refused before any model loads."""
    with pytest.raises(
        ValueError, match="guide_embedding_cache_dtype float16 is the format of the guide's cache"
    ):
        _config(tmp_path, guide_embedding_cache=False, guide_embedding_cache_dtype="float16")
    assert _config(tmp_path, guide_embedding_cache=False).guide_embedding_cache_dtype.value == "float32"


def test_the_guide_a_loss_holds_is_the_one_the_trainer_runs(tmp_path, tiny_model_path, tokenizer, wine_items):
    """A loss given with its own guide filters with it, and the trainer serves the distillation
    guard and the diagnostics from that same frozen copy instead of building a second one; a
    loss without one filters nothing, whatever ``false_negative_filter`` says."""
    from metricbert_trainer.metricbert.guide import StartingModelGuide
    from metricbert_trainer.metricbert.losses import TripletLoss

    model = load_masked_lm(tiny_model_path)
    loss = TripletLoss(guide=StartingModelGuide(model), false_negative_margin=0.05)
    args = _config(tmp_path, max_steps=2, logging_steps=1, distill_weight=1.0, false_negative_filter=False)
    trainer = MetricBertTrainer(model, args, train_dataset=wine_items, processing_class=tokenizer, loss=loss)
    assert trainer.guide is loss.guide
    trainer.train()
    assert len(_loss_history(trainer, "filtered_candidate_rate")) == 2
    assert len(_loss_history(trainer, "distill_loss")) == 2

    unguided = MetricBertTrainer(
        load_masked_lm(tiny_model_path),
        _config(tmp_path / "unguided", max_steps=1, guide_diagnostics=False, distill_weight=0.0),
        train_dataset=wine_items,
        processing_class=tokenizer,
        loss=TripletLoss(),
    )
    assert unguided.guide is None
    unguided.train()
    assert not _loss_history(unguided, "filtered_candidate_rate")


def test_texts_longer_than_max_length_are_truncated_and_counted(
    tmp_path, tiny_model_path, tokenizer, wine_items, caplog
):
    caplog.set_level("WARNING", logger="metricbert_trainer")
    long_description = " ".join(["tannic"] * 300)
    filling = " ".join(["wine"] * 62)  # 64 tokens with [CLS] and [SEP]: fills max_length, is not cut
    items = wine_items.select(range(8)).map(
        lambda item, index: {
            "description": long_description if index < 3 else filling if index == 3 else item["description"]
        },
        with_indices=True,
    )
    trainer = MetricBertTrainer(
        model=load_masked_lm(tiny_model_path),
        args=_config(tmp_path, max_length=64),
        train_dataset=items,
        processing_class=tokenizer,
    )
    assert "3 of 8 description texts are longer than max_length=64 tokens and are truncated" in caplog.text
    assert list(trainer.training_token_rows["description"].lengths[:4]) == [64] * 4
    batch = trainer.data_collator(list(items))
    assert batch["description_input_ids"].shape == (8, 64)


def test_catalogs_smaller_than_a_batch(tmp_path, tiny_model_path, tokenizer, wine_items, caplog):
    caplog.set_level("WARNING", logger="metricbert_trainer")
    trainer = MetricBertTrainer(
        model=load_masked_lm(tiny_model_path),
        args=_config(tmp_path, num_train_epochs=3),
        train_dataset=wine_items.select(range(3)),
        processing_class=tokenizer,
    )
    assert "3 items, fewer than one batch (16)" in caplog.text
    trainer.train()
    assert all(np.isfinite(loss) for loss in _loss_history(trainer, "loss"))
    with pytest.raises(ValueError, match="1 item"):
        MetricBertTrainer(
            model=load_masked_lm(tiny_model_path),
            args=_config(tmp_path),
            train_dataset=wine_items.select(range(1)),
            processing_class=tokenizer,
        )


def test_a_one_item_last_batch_adds_no_triplet(tmp_path, tiny_model_path, tokenizer, wine_items):
    # 17 items in batches of 16: the last batch has one item, so no negative to mine.
    trainer = MetricBertTrainer(
        model=load_masked_lm(tiny_model_path),
        args=_config(tmp_path, logging_steps=1),
        train_dataset=wine_items.select(range(17)),
        processing_class=tokenizer,
    )
    trainer.train()
    losses = _loss_history(trainer, "triplet_loss")
    assert len(losses) == 2 and losses[0] > 0 and losses[1] == 0
    assert all(torch.isfinite(parameter).all() for parameter in trainer.model.parameters())


def test_gradient_norms_of_each_term_are_logged_and_leave_training_as_it_was(
    tmp_path, tiny_model_path, tokenizer, wine_items
):
    """The norms come from extra backward passes of their own: the trained weights must be
    bit-identical to a run without them, and every weighted term must have its norm."""
    weights = []
    for measured in (False, True):
        args = _config(
            tmp_path / str(measured),
            max_steps=2,
            mlm_weight=1.0,
            mlm_probability=0.15,
            distill_weight=1.0,
            log_gradient_norms=measured,
        )
        trainer = MetricBertTrainer(
            load_masked_lm(tiny_model_path), args, train_dataset=wine_items, processing_class=tokenizer
        )
        trainer.train()
        weights.append({name: value.clone() for name, value in trainer.model.state_dict().items()})
        logged = [entry for entry in trainer.state.log_history if "loss" in entry]
        names = {"grad_norm_mlm", "grad_norm_triplet", "grad_norm_distill"}
        if measured:
            assert all(names <= set(entry) for entry in logged)
            assert all(entry[name] > 0 for entry in logged for name in names)
        else:
            assert not any(names & set(entry) for entry in logged)
    assert all(torch.equal(weights[0][name], weights[1][name]) for name in weights[0])


def test_gradient_norms_per_term_are_refused_with_gradient_checkpointing(tmp_path):
    with pytest.raises(ValueError, match="gradient checkpointing"):
        _config(tmp_path, activation_checkpointing=True, log_gradient_norms=True)
    _config(tmp_path, log_gradient_norms=True)  # accepted without it


class HostReads(torch.overrides.TorchFunctionMode):
    """Where this package reads a tensor's value on the host: on a GPU each read waits for the
    device to finish everything queued before it."""

    READS = {
        torch.Tensor.item,
        torch.Tensor.__float__,
        torch.Tensor.__int__,
        torch.Tensor.__bool__,
        torch.Tensor.tolist,
    }

    def __init__(self):
        super().__init__()
        self.places = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.READS:
            caller = traceback.extract_stack()[-2]  # reads inside transformers or torch are theirs
            if "/metricbert_trainer/" in caller.filename:
                self.places.append(f"{Path(caller.filename).name}:{caller.name}")
        return func(*args, **(kwargs or {}))


def test_the_logged_statistics_are_read_on_the_host_once_per_log_not_every_step(
    tmp_path, tiny_model_path, tokenizer, wine_items
):
    # The default objective's terms and statistics (MLM, guard, filter, diagnostics), 4 steps, one log.
    args = _config(
        tmp_path,
        logging_steps=4,
        max_steps=4,
        mlm_weight=1.0,
        mlm_probability=0.15,
        distill_weight=1.0,
        guide_embedding_cache=False,
    )
    trainer = MetricBertTrainer(
        load_masked_lm(tiny_model_path), args, train_dataset=wine_items, processing_class=tokenizer
    )
    reads = HostReads()
    with reads:
        trainer.train()
    per_step = collections.Counter(reads.places)
    # Every step: the non-finite loss check, and the miner's check that each anchor has a candidate.
    assert per_step.pop("trainer.py:training_step") == 4
    assert per_step.pop("mining.py:mine_negatives") == 4
    # Once per log: the recorded values, in one transfer.
    assert per_step.pop("trainer.py:local_means") == 1
    assert not per_step, per_step
    logged = trainer.state.log_history[0]
    assert {"mlm_loss", "triplet_loss", "distill_loss", "filtered_candidate_rate", "mean_d_ap"} <= set(logged)
