"""Label-free model selection: held-out items, title-to-description retrieval, agreement with the start."""

import numpy as np
import pytest
import torch

from metricbert_trainer.base.modeling import load_masked_lm
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.evaluation.label_free import (
    LabelFreeEvaluator,
    holdout_split,
    neighbour_agreement,
    title_to_description_retrieval,
)
from metricbert_trainer.scripts.train import report_label_free_change


def test_holdout_is_fixed_disjoint_and_at_most_a_fifth():
    kept, held = holdout_split(1000, 256)
    assert len(held) == 200 and len(kept) == 800  # a fifth of 1,000
    assert not set(kept) & set(held) and sorted(kept + held) == list(range(1000))
    assert holdout_split(1000, 256) == (kept, held)  # the same draw whatever the training seed
    assert holdout_split(10_000, 256)[1] != held[:256] and len(holdout_split(10_000, 256)[1]) == 256
    assert holdout_split(50, 256) == (list(range(50)), [])  # 10 items would be too few to rank


def test_retrieval_ranks_each_title_own_description():
    titles = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    # Item 0's description is nearest its title; item 1's is second (item 2's is nearer); item 2's first.
    descriptions = torch.tensor([[1.0, 0.05], [-0.2, 1.0], [0.1, 1.0]])
    mrr, recall = title_to_description_retrieval(titles, descriptions)
    assert recall == pytest.approx(100 * 2 / 3)
    assert mrr == pytest.approx(100 * (1 + 1 / 2 + 1) / 3)


def test_agreement_is_the_shared_share_of_neighbours():
    current = np.array([[1, 2], [0, 3], [0, 1]])
    start = np.array([[2, 1], [2, 3], [3, 1]])
    assert neighbour_agreement(current, start) == pytest.approx(100 * (2 + 1 + 1) / 6)


def test_the_starting_model_agrees_with_itself_and_training_changes_it(tiny_model_path, tokenizer, wines_csv):
    catalog = load_catalog(wines_csv)
    _, held = holdout_split(len(catalog), 40)
    model = load_masked_lm(tiny_model_path)
    evaluator = LabelFreeEvaluator.from_start(model, tokenizer, catalog, held, max_length=64)
    start = evaluator(model, tokenizer)
    assert start["lf_start_agreement@10"] == 100.0
    assert 0 < start["lf_t2d_recall@1"] <= start["lf_t2d_mrr"] <= 100
    with torch.no_grad():
        for parameter in model.base_model.encoder.parameters():
            parameter.add_(torch.randn_like(parameter))
    assert evaluator(model, tokenizer)["lf_start_agreement@10"] < 100.0


def test_too_few_held_out_items_are_refused(tiny_model_path, tokenizer, wines_csv):
    with pytest.raises(ValueError, match="more than k=10"):
        LabelFreeEvaluator.from_start(
            load_masked_lm(tiny_model_path), tokenizer, load_catalog(wines_csv), range(10)
        )


def test_the_user_is_told_how_the_label_free_signals_moved(caplog):
    history = [
        {"step": 0, "eval_lf_start_agreement@10": 100.0, "eval_lf_t2d_mrr": 20.0},
        {"step": 5, "loss": 1.0},
        {"step": 10, "eval_lf_start_agreement@10": 95.0, "eval_lf_t2d_mrr": 30.0},
    ]
    with caplog.at_level("INFO", logger="metricbert_trainer.scripts.train"):
        changes = report_label_free_change(history)
    assert changes == pytest.approx({"lf_start_agreement@10": -5.0, "lf_t2d_mrr": 10.0})
    assert "lf_t2d_mrr 20.00 -> 30.00" in caplog.text
    assert report_label_free_change([{"step": 10, "eval_lf_t2d_mrr": 55.0}]) is None  # no start to compare


def test_generic_recipe_holds_items_out_and_logs_the_signals_at_start_and_end(tmp_path, tiny_model_path):
    from conftest import QUICK_METRICBERT_RUN, REPO_ROOT, flags

    from metricbert_trainer.scripts.train import main as recipe_main

    debian = REPO_ROOT / "data" / "debian"
    quick = {**QUICK_METRICBERT_RUN}
    del quick["max_train_items"]  # every item but the held-out ones
    run = recipe_main(
        flags(
            model_name_or_path=tiny_model_path,
            output_dir=tmp_path / "run",
            catalog=debian / "debian-packages-4000.csv",
            selection_holdout=64,
            eval_on_start="true",
            distill_weight=1.0,
            **quick,
        ),
        default_config=REPO_ROOT / "recipes" / "catalog" / "minilm.yaml",
    )
    trainer = run.trainer
    assert len(trainer.train_dataset) == 4000 - 64
    assert (
        trainer.args.max_length == 128
    )  # p95 of the descriptions (286 tokens) capped by the tiny model's 128 positions
    evaluations = [entry for entry in trainer.state.log_history if "eval_lf_t2d_mrr" in entry]
    assert [entry["step"] for entry in evaluations] == [0, 4]
    assert evaluations[0]["eval_lf_start_agreement@10"] == 100.0
    assert "distill_loss" in next(entry for entry in trainer.state.log_history if "loss" in entry)
    assert "L_distill" in (tmp_path / "run" / "README.md").read_text(encoding="utf-8")
