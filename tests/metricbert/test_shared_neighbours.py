"""Shared neighbours in the hybrid teacher: the teacher's rows over the whole catalog, the
lists are the teacher's own nearest items over the whole catalog, a masked batch finds its items'
rows, and the overlaps enter the teacher's ranking with their weight."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import bare_config, tiny_metricbert_trainer

from metricbert_trainer.base.distances import Distance, pairwise_distance
from metricbert_trainer.data.catalog import load_catalog
from metricbert_trainer.data.token_rows import TokenRows
from metricbert_trainer.evaluation.candidate_lists import indexed_unit_rows, unit_rows_of
from metricbert_trainer.evaluation.ranking_rows import standardised_rows
from metricbert_trainer.metricbert import shared_neighbours as module
from metricbert_trainer.metricbert.collator import MetricBertCollator
from metricbert_trainer.metricbert.losses.teacher import hybrid_teacher_distillation
from metricbert_trainer.metricbert.setup import TrainingSetup
from metricbert_trainer.metricbert.shared_neighbours import (
    SharedNeighbours,
    teacher_candidate_lists,
    teacher_distance_rows,
    teacher_neighbour_lists,
)
from metricbert_trainer.metricbert.terms import StepVectors, TeacherTerm
from metricbert_trainer.metricbert.token_tfidf import JOINED, TokenTfidf, joined_counts

MAX_LENGTH = 48
FIELDS = ("title", "description")


@pytest.fixture(scope="module")
def wine_items(wines_csv):
    return load_catalog(wines_csv).dataset.select(range(40))


@pytest.fixture(scope="module")
def columns(wine_items) -> list[list[str]]:
    return [[str(text) for text in wine_items[name]] for name in FIELDS]


@pytest.fixture(scope="module")
def token_rows(tokenizer, columns) -> list[TokenRows]:
    return [TokenRows.tokenize(tokenizer, column, MAX_LENGTH) for column in columns]


@pytest.fixture(scope="module")
def token_tfidf(tokenizer, token_rows) -> TokenTfidf:
    counts = {name: rows.counts(len(tokenizer)) for name, rows in zip(FIELDS, token_rows, strict=True)}
    return TokenTfidf.fit(counts, tokenizer.all_special_ids)


def test_the_lists_are_the_teachers_nearest_items_over_the_whole_catalog(
    tokenizer, columns, token_rows, token_tfidf, monkeypatch
):
    generator = torch.Generator().manual_seed(0)
    encoder = [torch.randn(len(columns[0]), 16, generator=generator) for _ in FIELDS]
    tfidf = [
        token_tfidf.catalog_vectors(name, rows.counts(len(tokenizer)))
        for name, rows in zip(FIELDS, token_rows, strict=True)
    ]
    # The reference: the whole [N, N] fusion at once, in NumPy, as the hybrid ranking fuses.
    everyone = np.arange(len(columns[0]))
    encoder_rows = sum(pairwise_distance(v, v, Distance.ANGULAR).numpy() for v in encoder)
    tfidf_rows = sum(1 - (m @ m.T).toarray() for m in tfidf)
    fused = 0.7 * standardised_rows(encoder_rows, everyone) + 0.3 * standardised_rows(tfidf_rows, everyone)
    np.fill_diagonal(fused, np.inf)
    expected = np.argsort(fused, axis=1, kind="stable")[:, :5]
    some = torch.tensor([9, 0, 33])
    rows = teacher_distance_rows(encoder, tfidf, some, tfidf_weight=0.3)
    np.testing.assert_allclose(rows.numpy(), fused[some.numpy()], atol=1e-5)

    monkeypatch.setattr(module, "CHUNK", 7)  # several chunks, the last one short
    lists = teacher_neighbour_lists(encoder, tfidf, tfidf_weight=0.3, neighbours=5)
    assert lists.shape == (40, 5)
    np.testing.assert_array_equal(lists.numpy(), expected)
    with pytest.raises(ValueError, match="40 neighbours per item need a catalog of more items"):
        teacher_neighbour_lists(encoder, tfidf, tfidf_weight=0.3, neighbours=40)

    # Searched among every other item (an HNSW index of the start's vectors), the lists are the
    # exact ones; among fewer, each list is drawn from the item's nearest under the start.
    searched = teacher_candidate_lists(encoder, tfidf, tfidf_weight=0.3, neighbours=5, candidates=39)
    np.testing.assert_array_equal(searched.numpy(), expected)
    # A process's share of the rows (distributed.listed_in_shares), in any order, lists as the whole.
    share = torch.tensor([31, 2, 17, 3, 39, 0, 8])
    options = {"tfidf_weight": 0.3, "neighbours": 5, "rows": share}
    np.testing.assert_array_equal(teacher_neighbour_lists(encoder, tfidf, **options).numpy(), expected[share])
    shared = teacher_candidate_lists(encoder, tfidf, candidates=39, **options)
    np.testing.assert_array_equal(shared.numpy(), expected[share])
    # The start's views gathered at unit length from one cache (the trainer's guide) list the same.
    cache = torch.cat(encoder).numpy()
    cache_rows = {"title": np.arange(40), "description": np.arange(40, 80)}
    views = unit_rows_of(cache, cache_rows)
    gathered = teacher_candidate_lists(views, tfidf, tfidf_weight=0.3, neighbours=5, candidates=39)
    np.testing.assert_array_equal(gathered.numpy(), expected)
    # So do views that are the storage of the index they are searched in (the trainer's), added to
    # it in one call or in several (another HNSW graph).
    for chunk_rows in (40, 9):
        indexed = indexed_unit_rows(cache, cache_rows, chunk_rows=chunk_rows)
        assert indexed.index.ntotal == 40
        listed = teacher_candidate_lists(indexed, tfidf, tfidf_weight=0.3, neighbours=5, candidates=39)
        np.testing.assert_array_equal(listed.numpy(), expected)
    searched = teacher_candidate_lists(encoder, tfidf, tfidf_weight=0.3, neighbours=5, candidates=12)
    np.fill_diagonal(encoder_rows, np.inf)
    nearest_under_start = np.argsort(encoder_rows, axis=1, kind="stable")[:, :12]
    assert all(set(row) <= set(pool) for row, pool in zip(searched.numpy(), nearest_under_start, strict=True))
    recall = np.mean([len(set(a) & set(b)) for a, b in zip(searched.numpy(), expected, strict=True)]) / 5
    assert 0.7 < recall < 1.0


def test_a_masked_batch_finds_its_items_and_their_overlaps(tokenizer, wine_items, token_rows):
    # Six distinct other items per item, drawn at random.
    draws = [torch.randperm(40, generator=torch.Generator().manual_seed(i)).tolist() for i in range(40)]
    lists = torch.tensor([[other for other in draw if other != item][:6] for item, draw in enumerate(draws)])
    neighbours = SharedNeighbours(lists, [rows.keys for rows in token_rows])
    collator = MetricBertCollator(
        tokenizer, fields=FIELDS, max_length=MAX_LENGTH, mlm_probability=0.3, seed=0
    )
    chosen = [3, 17, 5, 30, 11]
    rows = neighbours.batch_rows(collator([wine_items[i] for i in chosen]), FIELDS)
    assert rows.tolist() == chosen

    overlaps = neighbours.overlaps(rows)
    sets = [{item, *lists[item].tolist()} for item in chosen]
    expected = [[len(a & b) / len(a | b) for b in sets] for a in sets]
    np.testing.assert_allclose(overlaps.numpy(), expected, atol=1e-6)

    stranger = {"title": "A wine nobody listed", "description": "Nothing like it in the catalog."}
    with pytest.raises(KeyError, match="not among the catalog's items"):
        neighbours.batch_rows(collator([stranger]), FIELDS)


def test_the_overlaps_weigh_in_the_teachers_ranking_by_their_weight():
    generator = torch.Generator().manual_seed(1)
    titles, descriptions = torch.randn(6, 8, generator=generator), torch.randn(6, 8, generator=generator)
    overlaps = torch.rand(6, 6, generator=generator)
    overlaps = (overlaps + overlaps.T) / 2

    def loss(guide_vectors, tfidf_distances, weight, given=overlaps):
        return hybrid_teacher_distillation(
            titles,
            descriptions,
            guide_vectors,
            tfidf_distances,
            tfidf_weight=0.2,
            temperature=0.5,
            neighbour_overlaps=given,
            shared_neighbour_weight=weight,
        )

    guide, other_guide = torch.randn(12, 8, generator=generator), torch.randn(12, 8, generator=generator)
    tfidf, other_tfidf = torch.rand(6, 6, generator=generator), torch.rand(6, 6, generator=generator)
    without = loss(guide, tfidf, 0.0, given=None)
    # Weight 0: the overlaps change nothing; weight 1: they alone are the teacher.
    assert loss(guide, tfidf, 0.0) == pytest.approx(without.item(), abs=1e-6)
    assert loss(guide, tfidf, 1.0) == pytest.approx(loss(other_guide, other_tfidf, 1.0).item(), abs=1e-6)
    assert abs(loss(guide, tfidf, 0.5) - without) > 1e-3
    with pytest.raises(ValueError, match="shared_neighbour_weight must be in"):
        loss(guide, tfidf, 1.5)


def test_the_option_serves_the_teacher_term_and_its_search_is_checked(tmp_path):
    """The lists serve only the teacher: without it they are left out (not listed over the whole
    catalog for nothing); searched among candidates, the search must be able to find them."""
    assert bare_config(output_dir=str(tmp_path), teacher_shared_neighbours=10).teacher_shared_neighbours == 0
    searched = {"output_dir": str(tmp_path), "teacher_weight": 1.0, "teacher_shared_neighbours": 10}
    with pytest.raises(ValueError, match="candidates at least as many"):
        bare_config(**searched, teacher_shared_neighbour_candidates=5)
    for unsearchable in ({"distance": "euclidean"}, {"teacher_tfidf_weight": 1.0}):
        with pytest.raises(ValueError, match="finds candidates by the start's cosines"):
            bare_config(**searched, teacher_shared_neighbour_candidates=50, **unsearchable)


def _teacher_trainer(tmp_path, model_path, tokenizer, items, neighbours: int, **overrides):
    """A tiny run of the teacher term with ``neighbours`` shared neighbours per item."""
    return tiny_metricbert_trainer(
        tmp_path,
        model_path,
        tokenizer,
        items,
        teacher_weight=1.0,
        teacher_shared_neighbours=neighbours,
        max_length=MAX_LENGTH,
        **overrides,
    )


def test_a_run_lists_the_neighbours_before_training_and_records_them_in_its_card(
    tmp_path, tiny_model_path, tokenizer, wine_items
):
    trainer = _teacher_trainer(tmp_path, tiny_model_path, tokenizer, wine_items, 4)
    trainer.train()
    assert trainer.teacher_parts.shared_neighbours.lists.shape == (40, 4)
    assert "training_token_rows" not in vars(trainer)  # read before the first step, not held for the run
    logged = [entry for entry in trainer.state.log_history if "teacher_loss" in entry]
    assert logged and all(np.isfinite(entry["teacher_loss"]) for entry in logged)
    config = trainer.args.loss_config()
    assert config["teacher_shared_neighbours"] == 4 and config["teacher_shared_neighbour_weight"] == 0.5

    # The term reads the overlaps: the same batch gets another teacher loss without them.
    with_overlaps, without = _teacher_terms_around(
        trainer, wine_items, lambda: setattr(trainer.teacher_parts, "shared_neighbours", None)
    )
    assert abs(with_overlaps - without) > 1e-3


def _teacher_terms_around(trainer, items, change) -> tuple[torch.Tensor, torch.Tensor]:
    """The teacher term of a batch of ``items``' first 12 under the trained model, before and after
    ``change()``."""
    batch = trainer.data_collator([items[i] for i in range(12)])
    with torch.no_grad():
        outputs = trainer.model.eval()(metric_batch=batch, fields=trainer.batch_fields)
        titles, descriptions = outputs["embeddings"][:2]
        step = StepVectors(
            inputs=batch,
            outputs=outputs,
            titles=titles,
            descriptions=descriptions,
            fields=tuple(trainer.batch_fields),
            guide_vectors=trainer.guide.embed(batch, trainer.batch_fields),
        )
        term = TeacherTerm.from_config(trainer.args, trainer.teacher_parts)
        before = term.distillation(step)
        change()
        return before, term.distillation(step)


def test_a_run_with_joined_fields_lists_and_ranks_by_their_tfidf_and_names_it_in_its_card(
    tmp_path, tiny_model_path, tokenizer, wine_items
):
    trainer = _teacher_trainer(
        tmp_path, tiny_model_path, tokenizer, wine_items, 4, max_steps=2, teacher_tfidf_mode="concat"
    )
    trainer.train()
    assert set(trainer.teacher_parts.tfidf.idf) == {JOINED}
    assert trainer.args.loss_config()["teacher_tfidf_mode"] == "concat"
    vocabulary = len(tokenizer)
    joined = joined_counts([rows.counts(vocabulary) for rows in trainer.training_token_rows.values()])
    options = {"tfidf_weight": trainer.args.teacher_tfidf_weight, "neighbours": 4}
    expected = teacher_neighbour_lists(
        TrainingSetup(trainer).guide_catalog_vectors(),
        [trainer.teacher_parts.tfidf.catalog_vectors(JOINED, joined)],
        **options,
    )
    assert torch.equal(trainer.teacher_parts.shared_neighbours.lists, expected)
    # Each field compared with its own lists other neighbours.
    each_field = TokenTfidf.fit(
        {name: rows.counts(vocabulary) for name, rows in trainer.training_token_rows.items()},
        tokenizer.all_special_ids,
    )
    per_field = [
        each_field.catalog_vectors(name, rows.counts(vocabulary))
        for name, rows in trainer.training_token_rows.items()
    ]
    assert not torch.equal(
        expected,
        teacher_neighbour_lists(TrainingSetup(trainer).guide_catalog_vectors(), per_field, **options),
    )

    # The batch term joins the fields too: the same batch gets another teacher loss compared each field.
    joined_term, each_field_term = _teacher_terms_around(
        trainer, wine_items, lambda: setattr(trainer.teacher_parts, "tfidf", each_field)
    )
    assert abs(joined_term - each_field_term) > 1e-4


@pytest.mark.parametrize("cache_dtype", ["float32", "float16"])
def test_a_run_can_search_the_lists_among_candidates_and_says_so_in_its_log_and_card(
    tmp_path, tiny_model_path, tokenizer, wine_items, caplog, cache_dtype
):
    trainer = _teacher_trainer(
        tmp_path,
        tiny_model_path,
        tokenizer,
        wine_items,
        4,
        max_steps=1,
        teacher_shared_neighbour_candidates=10,
        guide_embedding_cache_dtype=cache_dtype,
    )
    with caplog.at_level("INFO", logger="metricbert_trainer.metricbert.setup"):
        trainer.train()
    assert (
        "listing the teacher's 4 nearest items of each of 40 (among its 10 nearest under the start)"
        in caplog.text
    )
    assert trainer.teacher_parts.shared_neighbours.lists.shape == (40, 4)
    assert trainer.args.loss_config()["teacher_shared_neighbour_candidates"] == 10
    # The trainer gathers the start's unit views straight from the guide's cache (a float16 cache's
    # rows cast as gathered): the lists are those of the start's vectors of each field as they are
    # (HNSW over 40 items finds every neighbour).
    vocabulary = len(tokenizer)
    tfidf = [
        trainer.teacher_parts.tfidf.catalog_vectors(name, rows.counts(vocabulary))
        for name, rows in trainer.training_token_rows.items()
    ]
    options = {"tfidf_weight": trainer.args.teacher_tfidf_weight, "neighbours": 4, "candidates": 10}
    expected = teacher_candidate_lists(TrainingSetup(trainer).guide_catalog_vectors(), tfidf, **options)
    assert torch.equal(trainer.teacher_parts.shared_neighbours.lists, expected)


def test_a_catalog_too_small_for_k_trains_without_shared_neighbours_and_says_so(
    tmp_path, tiny_model_path, tokenizer, wine_items, caplog
):
    # The recipes' k of 50 on a catalog of 40 items: every item's set would be the whole catalog.
    trainer = _teacher_trainer(tmp_path, tiny_model_path, tokenizer, wine_items, 50, max_steps=1)
    with caplog.at_level("WARNING"):
        trainer.train()
    assert trainer.teacher_parts.shared_neighbours is None and trainer.state.global_step == 1
    assert "the catalog has 40 items, too few for that many neighbours" in caplog.text


def test_the_overlaps_count_every_pair_of_equal_entries_also_under_bf16_autocast():
    # Lists with repeated entries and FAISS's -1 for a missing neighbour: the overlap counts each
    # equal pair of two sets' entries, as comparing every entry with every other does.
    lists = torch.randint(-1, 30, (60, 20), generator=torch.Generator().manual_seed(0))
    neighbours = SharedNeighbours(lists, [[b"t%d" % i for i in range(60)], [b"d%d" % i for i in range(60)]])
    rows = torch.tensor([4, 17, 4, 59, 0, 33])
    sets = torch.cat([rows[:, None], lists[rows]], dim=1)
    shared = (sets[:, None, :, None] == sets[None, :, None, :]).sum(dim=(2, 3)).float()
    expected = shared / (2 * sets.shape[1] - shared)
    assert torch.equal(neighbours.overlaps(rows), expected)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(neighbours.overlaps(rows), expected)
