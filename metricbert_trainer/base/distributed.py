"""Cross-process batches: every anchor mines its negative from the global batch, not its shard.

Under data parallelism (DDP, DeepSpeed ZeRO, FSDP) each process embeds its own ``B`` items, and
an anchor mining only its own shard sees ``2B - 2`` candidates instead of ``2PB - 2``. Gathering
the pooled embeddings of all ``P`` processes widens the pool at the cost of an all-gather of
``[2, B, hidden]`` forward and an all-reduce of ``[2, PB, hidden]`` backward per step, which is
nothing beside the encoder.

The arithmetic that makes ``P`` processes train exactly like one process on the ``PB`` items:

- ``gather_with_grad`` concatenates the shards; its backward sums the gradient that every
  process's loss sends to each shard and hands each process the part for its own rows, so a
  process's encoder receives the gradient of the sum of all processes' losses;
- each process computes the loss of its own anchors only (against every gathered candidate) and
  scales it with ``share_of_global_mean``, so the processes' losses sum to ``P`` times the global
  mean;
- every engine here averages gradients over processes, which divides that ``P`` out again.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist


@contextmanager
def process_group_closed_at_exit() -> Iterator[None]:
    """Destroys the default process group, if this process joined one, when the block ends.

    A launched process that leaves its gloo process group alive can abort at interpreter exit
    (``terminate called without an active exception``, SIGABRT) while gloo's worker threads are torn
    down; the launcher then kills the other ranks and reports a finished run as failed. A run that
    ends normally first waits for every rank, so that no rank tears the group down while a peer still
    holds it (rank 0 writes the card and the plots after the others are done); one that raises closes
    it at once, as its peers may never arrive. Only a process's entry point may close it: the studies
    run several trainings in one process group.
    """
    try:
        yield
    except BaseException:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
        raise
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def world_size() -> int:
    """The number of processes training together, 1 outside ``torch.distributed``."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def is_first_process() -> bool:
    """Whether this is process 0 of a distributed run, or the only process outside one: the one
    that writes what every process would otherwise write alike, and reads what only it uses."""
    return world_size() == 1 or dist.get_rank() == 0


def first_process_value(value: object) -> object:
    """Process 0's ``value``, on every process (``value`` itself outside ``torch.distributed``): for
    what process 0 alone found out, and every process must act on alike. Every process must call
    this at the same point."""
    if world_size() == 1:
        return value
    received = [value]
    dist.broadcast_object_list(received, src=0)
    return received[0]


@dataclass(frozen=True)
class ProcessShard:
    """Which rows of a gathered batch this process contributed: ``start`` to ``start + size``."""

    start: int
    size: int
    world_size: int

    def owns(self, rows: torch.Tensor) -> torch.Tensor:
        """Boolean mask of the ``rows`` (indices into the gathered batch) that are this process's."""
        return (rows >= self.start) & (rows < self.start + self.size)


class _GatherWithGrad(torch.autograd.Function):
    """All-gather along ``dim`` of shards of the given ``sizes``; the backward returns each
    process the summed gradient of its own rows."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor, dim: int, sizes: list[int], rank: int) -> torch.Tensor:
        padding = max(sizes) - tensor.shape[dim]
        if padding:
            pad_shape = list(tensor.shape)
            pad_shape[dim] = padding
            tensor = torch.cat([tensor, tensor.new_zeros(pad_shape)], dim=dim)
        shards = [torch.empty_like(tensor) for _ in sizes]
        dist.all_gather(shards, tensor.contiguous())
        ctx.dim, ctx.sizes, ctx.rank = dim, sizes, rank
        return torch.cat(
            [shard.narrow(dim, 0, length) for shard, length in zip(shards, sizes, strict=True)], dim
        )

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = grad.contiguous()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        start = sum(ctx.sizes[: ctx.rank])
        return grad.narrow(ctx.dim, start, ctx.sizes[ctx.rank]), None, None, None


def gather_with_grad(tensor: torch.Tensor, dim: int = 0) -> tuple[torch.Tensor, ProcessShard]:
    """Every process's ``tensor`` concatenated along ``dim`` in rank order, and this process's rows.

    Shards may differ in size along ``dim`` (a last, uneven batch). Gradients flow back into the
    local ``tensor`` (see the module docstring). Every process must call this the same number of
    times, in the same order, as with any collective.
    """
    size = torch.tensor([tensor.shape[dim]], device=tensor.device)
    sizes = [torch.zeros_like(size) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, size)
    sizes = [int(value) for value in sizes]
    rank = dist.get_rank()
    gathered = _GatherWithGrad.apply(tensor, dim, sizes, rank)
    return gathered, ProcessShard(start=sum(sizes[:rank]), size=sizes[rank], world_size=len(sizes))


def gather_field_major(vectors: torch.Tensor) -> torch.Tensor:
    """A frozen model's ``[titles; descriptions]`` of this process's items, gathered into the same
    layout over every process's items (the layout the gathered student embeddings have)."""
    local = vectors.view(2, -1, vectors.shape[-1])
    return gather_with_grad(local, dim=1)[0].flatten(0, 1)


def share_of_global_mean(
    local_sum: torch.Tensor, local_count: int | torch.Tensor, shard: ProcessShard | None
) -> torch.Tensor:
    """This process's part of a mean over all processes' terms, scaled for gradient averaging.

    Without a shard it is the local mean ``local_sum / local_count``. With one it is
    ``local_sum * P / global_count``: averaged over the ``P`` processes (as the logged values and
    the engines' gradients are), that is exactly the mean over every process's terms, even when
    the processes hold different numbers of them. A zero joined to the graph when there is no term.
    """
    count = torch.as_tensor(local_count, dtype=torch.float32, device=local_sum.device)
    scale = 1.0
    if shard is not None:
        count = count.clone()
        dist.all_reduce(count, op=dist.ReduceOp.SUM)
        scale = shard.world_size
    # No term anywhere: the sum is 0, and 0 / 1 keeps it joined to the graph without the host
    # reading the count (a device sync every step on a GPU).
    return local_sum * scale / count.clamp(min=1)


def listed_in_shares(
    list_rows: Callable[[torch.Tensor], torch.Tensor], count: int, device: torch.device | str
) -> torch.Tensor:
    """``list_rows(rows)`` of all ``count`` rows, on every process, each process listing one share.

    What the processes need before training, the batches' neighbour lists and the teacher's shared
    neighbours above all, must come out the same on all of them: each draws the epoch's order of
    items from its own lists and keeps its share, so lists that differ would repeat some items and
    skip others. So must the token counts by which each process of a shared encoding takes its
    share of the texts (``encoding.longest_first``). Each process lists a contiguous share of the
    rows (``torch.arange``, sizes within one of each other) and every process receives all the
    shares, gathered through ``device`` (the run's own: NCCL sends CUDA tensors only): ``P``
    processes list ``N / P`` rows each instead of all ``N`` rows each, which on one machine also
    stops them competing for its cores. Rows listed from a FAISS index, which parallel threads fill
    in whatever order they run, may differ a little from one process's index to another's;
    gathered, every process holds the same lists. ``list_rows`` must return ``[len(rows), K]`` with
    the same ``K`` and dtype on every process."""
    processes = world_size()
    if processes == 1:
        return list_rows(torch.arange(count))
    if count < processes:
        raise ValueError(f"{count} rows cannot be shared among {processes} processes.")
    bounds = [share * count // processes for share in range(processes + 1)]
    sizes = [end - start for start, end in itertools.pairwise(bounds)]
    rank = dist.get_rank()
    own = list_rows(torch.arange(bounds[rank], bounds[rank + 1]))
    # all_gather sends tensors of one shape: every share padded to the largest.
    padded = torch.zeros((max(sizes), *own.shape[1:]), dtype=own.dtype, device=device)
    padded[: len(own)] = own.to(device)
    shares = [torch.empty_like(padded) for _ in range(processes)]
    dist.all_gather(shares, padded)
    return torch.cat([share[:size] for share, size in zip(shares, sizes, strict=True)]).to(own.device)


def gathered_in_rank_order(own: np.ndarray, device: torch.device | str) -> np.ndarray:
    """Every process's one-dimensional ``own`` (of any length and dtype, the same dtype on every
    process) joined in rank order, on every process: what contiguous shares of rows, each process's
    own (``listed_in_shares``), hold when a row's size varies (a text's token ids). Gathered
    through ``device`` (NCCL sends CUDA tensors only) ``GATHER_BYTES`` of each process at a time,
    as bytes: the collectives do not all send 16-bit integers, and the whole of ten million items'
    token ids (10 GiB) would otherwise be on the device at once."""
    own = np.ascontiguousarray(own)
    size = torch.tensor([own.nbytes], device=device)
    sizes = [torch.zeros_like(size) for _ in range(world_size())]
    dist.all_gather(sizes, size)
    sizes = [int(value) for value in sizes]
    starts = np.concatenate([[0], np.cumsum(sizes)])
    joined = np.empty(int(starts[-1]), dtype=np.uint8)
    own_bytes = own.view(np.uint8)
    for first in range(0, max(sizes), GATHER_BYTES):
        part = np.zeros(min(GATHER_BYTES, max(sizes) - first), dtype=np.uint8)
        mine = own_bytes[first : first + len(part)]
        part[: len(mine)] = mine
        sent = torch.from_numpy(part).to(device)
        pieces = [torch.empty_like(sent) for _ in sizes]
        dist.all_gather(pieces, sent)
        for start, size, piece in zip(starts[:-1], sizes, pieces, strict=True):
            taken = max(0, min(len(part), size - first))
            joined[start + first : start + first + taken] = piece[:taken].cpu().numpy()
        del sent, pieces
    return joined.view(own.dtype)


# Bytes of each process gathered at a time by ``gathered_in_rank_order``.
GATHER_BYTES = 1 << 28


def mean_by_name_across_processes(local: dict[str, float], device: torch.device | str) -> dict[str, float]:
    """Each named value averaged over the processes that recorded it, on every process.

    Some logged statistics are conditional (a guide statistic, a term of anchors that may all be
    filtered, RecoBERT's matched and mismatched scores), so processes can hold different names.
    Reducing each process's own sorted values would then pair different names, or fail on unequal
    shapes; the names are agreed first (their union), and each value is averaged over the
    processes that have it. Every process must call this at the same point, as ``Trainer.log`` is.
    """
    if world_size() == 1:
        return dict(local)
    gathered: list[list[str]] = [[] for _ in range(world_size())]
    dist.all_gather_object(gathered, sorted(local))
    names = sorted(set().union(*gathered))
    sums_and_counts = torch.tensor(
        [[local.get(name, 0.0), float(name in local)] for name in names], dtype=torch.float64, device=device
    ).reshape(len(names), 2)
    dist.all_reduce(sums_and_counts, op=dist.ReduceOp.SUM)
    return {
        name: float(total / count)
        for name, (total, count) in zip(names, sums_and_counts.tolist(), strict=True)
    }
