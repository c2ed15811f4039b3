"""No NaN or Inf in any objective's loss, logged statistics or gradients, however degenerate the batch.

The formulas have their singularities exactly where degenerate batches put them: arccos at
cos = +-1 (identical and antipodal vectors), sqrt at 0 (the euclidean distance of identical
vectors), the normalisation of zero vectors, and squares that overflow or underflow float32
(magnitudes of 1e30 and 1e-30). Each batch goes through every objective, distance, mining and
anchor mode, once as float32 embeddings and once as bf16 embeddings made under CPU autocast, the
loss and its backward running under the same autocast.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math

import pytest
import torch
from conftest import bare_config, intra_op_threads

from metricbert_trainer.base.distances import Distance, paired_distance, pairwise_distance
from metricbert_trainer.base.pooling import mean_pool
from metricbert_trainer.metricbert.guide import StartingModelGuide
from metricbert_trainer.metricbert.losses import InBatchLoss, Objective, build_loss, embedding_spread
from metricbert_trainer.metricbert.losses.mining import Anchors, Mining, NegativePool

HIDDEN = 8
PRECISIONS = ("float32", "bf16_autocast")


def _random(rows: int, seed: int) -> torch.Tensor:
    return torch.randn(rows, HIDDEN, generator=torch.Generator().manual_seed(seed))


def _identical() -> tuple[torch.Tensor, torch.Tensor]:
    vector = _random(1, 0)
    return vector.repeat(4, 1), vector.repeat(4, 1)


def _antipodal_negatives() -> tuple[torch.Tensor, torch.Tensor]:
    # Items (v, v) and (-v, -v): every anchor's positive is itself and every candidate its opposite.
    vector = _random(1, 0)
    items = torch.cat([vector, -vector])
    return items, items.clone()


def _zero_rows() -> tuple[torch.Tensor, torch.Tensor]:
    titles, descriptions = _random(4, 0), _random(4, 1)
    titles[0], descriptions[1] = 0.0, 0.0
    return titles, descriptions


BATCHES = {
    "identical": _identical,
    "antipodal_positives": lambda: (_random(4, 0), -_random(4, 0)),
    "antipodal_negatives": _antipodal_negatives,
    "zero_rows": _zero_rows,
    "all_zero": lambda: (torch.zeros(4, HIDDEN), torch.zeros(4, HIDDEN)),
    "huge": lambda: (1e30 * _random(4, 0), 1e30 * _random(4, 1)),
    "tiny": lambda: (1e-30 * _random(4, 0), 1e-30 * _random(4, 1)),
}


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """The tensors here hold a few dozen numbers: a second thread only adds a barrier to every op,
    which costs milliseconds whenever the other core is busy (the file then runs 6x slower)."""
    with intra_op_threads(1):
        yield


def _every_loss_setting():
    for objective, distance, mining, anchors in itertools.product(Objective, Distance, Mining, Anchors):
        if objective is Objective.MNRL and mining is not Mining.HARD:
            continue  # every candidate is an mnrl negative: it refuses any other mining
        yield pytest.param(
            objective,
            distance,
            mining,
            anchors,
            id=f"{objective.value}-{distance.value}-{mining.value}-{anchors.value}",
        )


@functools.cache
def _loss(
    objective: Objective,
    distance: Distance = Distance.ANGULAR,
    mining: Mining = Mining.HARD,
    anchors: Anchors = Anchors.BOTH,
    negative_pool: NegativePool = NegativePool.ALL,
) -> InBatchLoss:
    config = bare_config(
        output_dir="unused",
        report_to="none",
        use_cpu=True,
        cpu_bf16=False,
        objective=objective,
        distance=distance,
        mining=mining,
        anchors=anchors,
        negative_pool=negative_pool,
    )
    return build_loss(config)


def _precision_context(precision: str) -> contextlib.AbstractContextManager:
    if precision == "bf16_autocast":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _embed(leaves: list[torch.Tensor], precision: str) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The embeddings the loss sees, and the tensors whose gradients must be finite.

    In float32 the leaves themselves; under autocast their image by an identity ``Linear``, which
    autocast runs in bf16, as it runs the encoder's last layer in bf16 training.
    """
    if precision == "float32":
        return leaves, leaves
    layer = torch.nn.Linear(HIDDEN, HIDDEN, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.eye(HIDDEN))
    embeddings = [layer(leaf) for leaf in leaves]
    assert all(embedding.dtype == torch.bfloat16 for embedding in embeddings)
    for embedding in embeddings:
        embedding.retain_grad()
    return embeddings, [*leaves, *embeddings, layer.weight]


def _assert_finite_loss_and_gradients(
    loss: InBatchLoss, batch: str, precision: str, guided: bool = False, exclude_all: bool = False
):
    leaves = [part.requires_grad_(True) for part in BATCHES[batch]()]
    with _precision_context(precision):
        embeddings, watched = _embed(leaves, precision)
        excluded = None
        if guided:
            # The starting model as guide: at the first step it embeds exactly as the model does.
            anchor_index, positive_index = loss.anchors_and_positives(len(leaves[0]), leaves[0].device)
            guide_vectors = torch.cat(embeddings).detach().float()
            excluded = StartingModelGuide.closer_than_positive(guide_vectors, anchor_index, positive_index)
            if exclude_all:
                excluded = torch.ones_like(excluded)
        output = loss(*embeddings, excluded)
        spread = embedding_spread(torch.cat(embeddings))
    output.loss.backward()

    assert torch.isfinite(output.loss), output.loss
    for position, tensor in enumerate(watched):
        assert tensor.grad is not None and torch.isfinite(tensor.grad).all(), f"gradient {position}"
    assert all(math.isfinite(value) for value in output.statistics.values()), output.statistics
    assert math.isfinite(spread)
    return output


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize(("objective", "distance", "mining", "anchors"), _every_loss_setting())
def test_loss_and_gradients_stay_finite_on_degenerate_batches(
    objective, distance, mining, anchors, batch, precision
):
    _assert_finite_loss_and_gradients(_loss(objective, distance, mining, anchors), batch, precision)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("negative_pool", NegativePool)
@pytest.mark.parametrize("objective", Objective)
def test_false_negative_filter_stays_finite_on_degenerate_batches(objective, negative_pool, batch, precision):
    loss = _loss(objective, negative_pool=negative_pool)
    _assert_finite_loss_and_gradients(loss, batch, precision, guided=True)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("batch", BATCHES)
def test_anchors_left_without_candidates_give_a_finite_zero_loss(batch, precision):
    output = _assert_finite_loss_and_gradients(
        _loss(Objective.TRIPLET), batch, precision, guided=True, exclude_all=True
    )
    assert output.loss.item() == 0.0 and len(output.anchor_index) == 0


@pytest.mark.parametrize("distance", [Distance.ANGULAR, Distance.COSINE])
def test_cosine_distances_are_float32_under_bf16_autocast(distance):
    # In bf16 a cosine above 0.998 rounds to 1.0, where arccos's slope is infinite, and so does
    # the clamp meant to keep it away from there.
    vectors = _random(3, 0).requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        distances = pairwise_distance(vectors, vectors, distance)
    assert distances.dtype == torch.float32
    distances.diagonal().sum().backward()
    assert torch.isfinite(vectors.grad).all()


@pytest.mark.parametrize("magnitude", [1e30, 1e-30])
def test_euclidean_distance_is_exact_far_beyond_squares_in_float32(magnitude):
    # 3-4-5 scaled to where the squares overflow (1e60) or underflow (1e-60) float32.
    left = torch.tensor([[3.0 * magnitude, 0.0]], requires_grad=True)
    right = torch.tensor([[0.0, 4.0 * magnitude]])
    distance = paired_distance(left, right, Distance.EUCLIDEAN)
    assert distance.item() == pytest.approx(5.0 * magnitude, rel=1e-6)
    distance.sum().backward()
    torch.testing.assert_close(left.grad, torch.tensor([[0.6, -0.8]]))


@pytest.mark.parametrize("precision", PRECISIONS)
def test_mean_pool_of_an_all_padding_row_is_zero_with_finite_gradients(precision):
    tokens = _random(6, 0).view(2, 3, HIDDEN).requires_grad_(True)
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]])
    with _precision_context(precision):
        (embeddings,), watched = _embed([tokens], precision)
        pooled = mean_pool(embeddings, mask)
    pooled.float().sum().backward()
    assert torch.equal(pooled[1].float(), torch.zeros(HIDDEN))
    assert all(torch.isfinite(tensor.grad).all() for tensor in watched)
