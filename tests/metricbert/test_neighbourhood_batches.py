"""Neighbourhood batches: each batch is made of groups of items the starting model places together."""

import logging

import numpy as np
import pytest
import torch
from conftest import bare_config, tiny_metricbert_trainer

from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.data.token_rows import TokenRows
from metricbert_trainer.metricbert import neighbourhood_batches
from metricbert_trainer.metricbert.neighbourhood_batches import (
    NeighbourhoodSampler,
    item_vectors,
    nearest_neighbours,
    neighbourhood_groups,
)


def _clusters(count: int, size: int, dimensions: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """Unit vectors in ``count`` tight, well-separated clusters of ``size``, shuffled; and each one's cluster."""
    generator = torch.Generator().manual_seed(0)
    centres = torch.randn(count, dimensions, generator=generator) * 10
    cluster = torch.arange(count).repeat_interleave(size)
    vectors = centres[cluster] + torch.randn(count * size, dimensions, generator=generator) * 0.1
    order = torch.randperm(count * size, generator=generator)
    return torch.nn.functional.normalize(vectors[order], dim=1), cluster[order]


def test_each_run_of_the_epoch_is_one_neighbourhood_and_every_item_comes_once():
    vectors, cluster = _clusters(count=6, size=8)
    sampler = NeighbourhoodSampler(nearest_neighbours(vectors, candidates=32), neighbourhood_size=8, seed=3)
    order = list(sampler)
    assert sorted(order) == list(range(48))
    runs = [order[start : start + 8] for start in range(0, 48, 8)]
    assert all(len(set(cluster[run].tolist())) == 1 for run in runs)


def test_the_order_follows_the_seed_and_the_epoch():
    vectors, _ = _clusters(count=6, size=8)
    neighbours = nearest_neighbours(vectors, candidates=32)
    first = NeighbourhoodSampler(neighbours, 8, seed=3)
    again = NeighbourhoodSampler(neighbours, 8, seed=3)
    assert list(first) == list(again)
    first_epoch = list(first)
    first.set_epoch(1)
    assert list(first) != first_epoch
    again.set_epoch(1)
    assert list(first) == list(again)


def test_groups_short_of_free_neighbours_are_topped_up_and_the_short_one_comes_last():
    vectors, _ = _clusters(count=5, size=5)
    # One candidate each: most groups find too few free neighbours in their lists.
    groups = neighbourhood_groups(
        nearest_neighbours(vectors, candidates=1), 4, torch.Generator().manual_seed(0)
    )
    assert sorted(item for group in groups for item in group) == list(range(25))
    assert [len(group) for group in groups] == [4] * 6 + [1]
    order = list(NeighbourhoodSampler(nearest_neighbours(vectors, candidates=1), 4, seed=0))
    assert len(order) == 25 and sorted(order) == list(range(25))


def test_an_exhaustively_searched_faiss_index_lists_the_exact_neighbours():
    vectors = torch.nn.functional.normalize(
        torch.randn(400, 16, generator=torch.Generator().manual_seed(1)), dim=1
    )
    exact = nearest_neighbours(vectors, candidates=12)
    assert torch.equal(nearest_neighbours(vectors, 12, index="Flat"), exact)
    # A process's share of the rows (distributed.listed_in_shares), in any order, lists as the whole.
    share = torch.tensor([399, 5, 200, 0, 17])
    assert torch.equal(nearest_neighbours(vectors, 12, rows=share), exact[share])
    assert torch.equal(nearest_neighbours(vectors, 12, index="Flat", rows=share), exact[share])
    # An IVF index probing all of its 8 lists compares every pair, as the exact lists do.
    assert torch.equal(
        nearest_neighbours(vectors, 12, index="IVF8,Flat", search_parameters="nprobe=8"), exact
    )
    # Probing one list of 8 misses neighbours in the other lists, but never lists an item as its own.
    approximate = nearest_neighbours(vectors, 12, index="IVF8,Flat", search_parameters="nprobe=1")
    assert approximate.shape == exact.shape
    assert not (approximate == torch.arange(400)[:, None]).any()
    assert ((approximate >= 0) & (approximate < 400)).all()
    overlap = sum(len(set(a) & set(b)) for a, b in zip(approximate.tolist(), exact.tolist(), strict=True))
    assert 0.2 < overlap / exact.numel() < 1


@pytest.mark.parametrize("cache_dtype", [torch.float32, torch.float16])
def test_lists_from_the_cache_a_few_items_at_a_time_are_the_lists_of_the_item_matrix(
    monkeypatch, cache_dtype
):
    # As a run holds them: one cache of every distinct text, each field's rows of it.
    cache = torch.randn(700, 16, generator=torch.Generator().manual_seed(2)).to(cache_dtype)
    field_rows = [np.arange(0, 400), np.random.default_rng(0).permutation(np.arange(300, 700))]
    fields = [cache, cache]
    share = torch.tensor([399, 5, 200, 0, 17, 42, 3, 250])
    settings = [
        {},  # exact
        {"index": "Flat"},
        {"index": "IVF8,Flat", "search_parameters": "nprobe=1"},  # approximate: misses differ by query
    ]
    matrix = item_vectors(fields, field_rows)
    at_once = {
        (number, rows is None): nearest_neighbours(matrix, 12, **setting, rows=rows)
        for number, setting in enumerate(settings)
        for rows in (None, share)
    }
    # Items added to the trained IVF index, and every index asked, 3 at a time.
    monkeypatch.setattr(neighbourhood_batches, "QUERY_ROWS", 3)
    for number, setting in enumerate(settings):
        for rows in (None, share):
            listed = neighbourhood_batches.neighbours_of_fields(fields, field_rows, 12, **setting, rows=rows)
            assert torch.equal(listed, at_once[number, rows is None]), (setting, rows)


def test_an_index_faiss_cannot_build_or_would_barely_search_is_refused_before_training(tmp_path):
    options = {
        "output_dir": str(tmp_path),
        "report_to": "none",
        "use_cpu": True,
        "batch_neighbourhood_size": 4,
    }
    with pytest.raises(ValueError, match="FAISS says could not parse index string IVFx,Flat"):
        bare_config(**options, neighbourhood_index="IVFx,Flat")
    with pytest.raises(ValueError, match="could not set parameter efSerch"):
        bare_config(**options, neighbourhood_index="HNSW8", neighbourhood_search_parameters="efSerch=2")
    # FAISS would probe one of the 8 lists, silently: the probes must be named.
    with pytest.raises(ValueError, match="'IVF8,Flat' is an inverted file: FAISS searches 1 of its 8 lists"):
        bare_config(**options, neighbourhood_index="IVF8,Flat")
    named = bare_config(
        **options, neighbourhood_index="IVF8,Flat", neighbourhood_search_parameters="nprobe=1"
    )
    assert named.neighbourhood_search_parameters == "nprobe=1"


def test_item_vectors_compare_items_by_the_mean_of_their_fields_cosines():
    titles, descriptions = torch.randn(5, 8), torch.randn(5, 8)
    items = item_vectors([titles, descriptions])
    unit = [torch.nn.functional.normalize(field, dim=1) for field in (titles, descriptions)]
    expected = (unit[0] @ unit[0].T + unit[1] @ unit[1].T) / 2
    assert torch.allclose(items @ items.T, expected, atol=1e-6)
    # Bit for bit the fields scaled apart and joined, the recipe's lists before each field's rows
    # were gathered in place; and the same items when their rows are picked from one matrix.
    assert torch.equal(items, torch.cat(unit, dim=1) / 2**0.5)
    cache, picked = torch.cat([descriptions, titles]), [np.arange(5, 10), np.arange(5)]
    assert torch.equal(item_vectors([cache, cache], picked), items)


def _trainer(tmp_path, model_path, tokenizer, items, **overrides):
    return tiny_metricbert_trainer(
        tmp_path / "out", model_path, tokenizer, items, disable_tqdm=True, **overrides
    )


@pytest.mark.parametrize(
    "index",
    [
        {},
        # The lists from a FAISS index, searched exhaustively here: the groups must come out as near.
        {"neighbourhood_index": "IVF2,Flat", "neighbourhood_search_parameters": "nprobe=2"},
        # The lists from the guide's cache held in float16, its rows cast as they are gathered.
        {"guide_embedding_cache_dtype": "float16"},
    ],
)
def test_training_draws_its_batches_from_neighbourhoods_of_the_starting_model(
    tmp_path, tiny_model_path, tokenizer, wines_csv, index, caplog
):
    caplog.set_level(logging.INFO, logger="metricbert_trainer")
    items = load_catalog(wines_csv).dataset.select(range(64))
    trainer = _trainer(
        tmp_path, tiny_model_path, tokenizer, items, batch_neighbourhood_size=4, distill_weight=1.0, **index
    )
    trainer.args.max_steps = 6  # 4 batches an epoch: the loop reaches the second epoch
    trainer.train()
    assert trainer.state.global_step == 6
    assert f"nearest items of each of 64 ({index.get('neighbourhood_index', 'exact')})" in caplog.text
    sampler = trainer.neighbourhood_sampler
    assert sampler.epoch == 1  # the loop tells the sampler each epoch, so each draws its own groups
    cache = trainer.guide.cache_matrix()
    vectors = item_vectors(
        [
            cache[trainer.guide.cache_rows(TokenRows.tokenize(tokenizer, items[name], max_length=64).keys)]
            for name in ("title", "description")
        ]
    )
    similarity = vectors @ vectors.T
    similarity.fill_diagonal_(-torch.inf)
    rank = similarity.argsort(dim=1, descending=True).argsort(dim=1)  # 0: an item's nearest other item
    order = list(sampler)
    group_ranks = [
        rank[a, b].item()
        for start in range(0, 64, 4)
        for a in order[start : start + 4]
        for b in order[start : start + 4]
        if a != b
    ]
    # At random a group-mate would rank 31 of 63 on average (0 is the nearest); the greedy groups
    # take the nearest free ones, and the last groups of the epoch take what is left (17 here).
    assert sum(group_ranks) / len(group_ranks) < 22
    # The loop's batches are the sampler's runs: the titles' lengths, in order.
    batch = next(iter(trainer.get_train_dataloader()))
    sampler.set_epoch(0)
    expected = [
        len(tokenizer(items[index]["title"], truncation=True, max_length=64)["input_ids"])
        for index in list(sampler)[:16]
    ]
    assert batch["title_attention_mask"].sum(dim=1).tolist() == expected


@pytest.mark.parametrize("size", [1, 17])
def test_a_neighbourhood_that_cannot_fill_a_batch_is_refused(tmp_path, size):
    with pytest.raises(ValueError, match="batch_neighbourhood_size"):
        bare_config(
            output_dir=str(tmp_path),
            report_to="none",
            use_cpu=True,
            per_device_train_batch_size=16,
            batch_neighbourhood_size=size,
        )


def test_neighbourhoods_without_a_guide_are_refused(tmp_path, tiny_model_path, tokenizer, wines_csv):
    items = load_catalog(wines_csv).dataset.select(range(32))
    with pytest.raises(ValueError, match="the guide's"):
        _trainer(
            tmp_path,
            tiny_model_path,
            tokenizer,
            items,
            batch_neighbourhood_size=4,
            false_negative_filter=False,
            distill_weight=0.0,
            guide_diagnostics=False,
        )
