"""Views inside an item: description windows, their batch slot, and the view term in training."""

import numpy as np
import pytest
import torch

from metricbert_trainer.base.collator import field_inputs, unmasked
from metricbert_trainer.base.modeling import load_masked_lm
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.metricbert.collator import MetricBertCollator
from metricbert_trainer.metricbert.config import MetricBertConfig
from metricbert_trainer.metricbert.description_views import (
    DESCRIPTION_VIEW,
    SECOND_DESCRIPTION_VIEW,
    description_view,
    disjoint_description_views,
)
from metricbert_trainer.metricbert.trainer import MetricBertTrainer


@pytest.fixture(scope="module")
def wine_items(wines_csv):
    return load_catalog(wines_csv).dataset.select(range(48))


def test_a_view_is_a_window_of_at_most_half_the_words_drawn_anew_each_time():
    words = [f"w{index}" for index in range(40)]
    generator = torch.Generator().manual_seed(0)
    views = [description_view(" ".join(words), 12, generator) for _ in range(30)]
    for view in views:
        window = view.split()
        assert len(window) == 12
        start = words.index(window[0])
        assert window == words[start : start + 12]
    assert len(set(views)) > 10, "the window's start is drawn"
    # Half of a short description, and one word of a one-word description.
    half = description_view("a b c d e f", 12, torch.Generator().manual_seed(1)).split()
    assert len(half) == 3 and " ".join(half) in "a b c d e f"
    assert description_view("single", 12, generator) == "single"
    assert description_view("", 12, generator) == ""
    with pytest.raises(ValueError, match="at least 1"):
        description_view("a b", 0, generator)


def test_a_pair_of_views_takes_one_window_from_each_half():
    words = [f"w{index}" for index in range(41)]
    generator = torch.Generator().manual_seed(0)
    for _ in range(20):
        first, second = (view.split() for view in disjoint_description_views(" ".join(words), 8, generator))
        assert len(first) == len(second) == 8
        assert all(words.index(word) < 20 for word in first) and all(
            words.index(word) >= 20 for word in second
        )
        assert first == words[words.index(first[0]) : words.index(first[0]) + 8]
    assert disjoint_description_views("a b c", 8, generator) == ("a", "b c")
    assert disjoint_description_views("single", 8, generator) == ("single", "single")


def test_the_collator_adds_each_items_view_of_its_own_description(tokenizer, wine_items):
    items = list(wine_items.select(range(16)))
    collator = MetricBertCollator(tokenizer, max_length=128, description_view_words=10)
    batch = collator(items)
    views = unmasked(field_inputs(batch, DESCRIPTION_VIEW))
    descriptions = unmasked(field_inputs(batch, "description"))
    assert "description_view_labels" in batch, "views are masked for MLM like the fields"
    for row in range(len(items)):
        view = tokenizer.decode(views["input_ids"][row], skip_special_tokens=True)
        description = tokenizer.decode(descriptions["input_ids"][row], skip_special_tokens=True)
        assert view and view in description, (row, view)
        assert len(view.split()) <= len(description.split()) // 2 + 3  # word pieces may split words
    # The same batch and seed draw the same views; another seed other ones.
    again = collator(items)
    assert torch.equal(again["description_view_input_ids"], batch["description_view_input_ids"])
    other = MetricBertCollator(tokenizer, max_length=128, description_view_words=10, seed=1)(items)
    assert not torch.equal(
        unmasked(field_inputs(other, DESCRIPTION_VIEW))["input_ids"][:, :5], views["input_ids"][:, :5]
    )
    without = MetricBertCollator(tokenizer, max_length=128)(items)
    assert not any(key.startswith(DESCRIPTION_VIEW) for key in without)


def test_paired_views_fill_two_slots_from_the_two_halves(tokenizer, wine_items):
    items = list(wine_items.select(range(8)))
    batch = MetricBertCollator(
        tokenizer,
        max_length=128,
        mlm_probability=0.0,
        description_view_words=6,
        description_view_partner="view",
    )(items)
    for row, item in enumerate(items):
        words = item["description"].split()
        middle = len(words) // 2
        first = tokenizer.decode(batch["description_view_input_ids"][row], skip_special_tokens=True)
        second = tokenizer.decode(
            batch[f"{SECOND_DESCRIPTION_VIEW}_input_ids"][row], skip_special_tokens=True
        )
        assert first in tokenizer.decode(
            tokenizer(" ".join(words[:middle]))["input_ids"], skip_special_tokens=True
        )
        assert second in tokenizer.decode(
            tokenizer(" ".join(words[middle:]))["input_ids"], skip_special_tokens=True
        )


def test_views_need_a_title_and_description_catalog(tokenizer):
    with pytest.raises(ValueError, match="this one has the fields"):
        MetricBertCollator(tokenizer, fields=("title", "description", "tags"), description_view_words=8)


def test_the_view_term_is_weighted_into_the_loss_and_trains(tmp_path, tiny_model_path, tokenizer, wine_items):
    def run(learning_rate, epochs, **settings):
        args = MetricBertConfig(
            output_dir=str(tmp_path / f"out-{learning_rate}"),
            per_device_train_batch_size=16,
            learning_rate=learning_rate,
            num_train_epochs=epochs,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            seed=0,
            use_cpu=True,
            distill_weight=0.0,
            description_view_words=12,
            **settings,
        )
        trainer = MetricBertTrainer(
            load_masked_lm(tiny_model_path), args, train_dataset=wine_items, processing_class=tokenizer
        )
        trainer.train()
        return trainer

    weighted = run(0.0, 1, description_view_weight=0.5, guide_diagnostics=False, false_negative_filter=False)
    entry = weighted.state.log_history[0]
    assert entry["loss"] == pytest.approx(entry["triplet_loss"] + 0.5 * entry["view_loss"], rel=1e-3)
    assert "description_view_weight * L_view" in weighted.objective_card_section()
    # The view term alone, with the guide filtering its negatives: it falls as views find their partners.
    for partner in ("description", "view"):
        alone = run(3e-3, 8, triplet_weight=0.0, mining="random", description_view_partner=partner)
        view_losses = [entry["view_loss"] for entry in alone.state.log_history if "view_loss" in entry]
        assert len(view_losses) == 24 and np.all(np.isfinite(view_losses))
        assert np.mean(view_losses[-3:]) < 0.6 * np.mean(view_losses[:3]), (partner, view_losses)
