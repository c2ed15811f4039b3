"""A recipe's entry point closes the launch's process group, on success and on error alike."""

from __future__ import annotations

import pytest
import torch.distributed as dist

from metricbert_trainer.base.distributed import process_group_closed_at_exit


@pytest.fixture
def joined_process_group(tmp_path):
    """A real one-process gloo group, as ``accelerate launch`` would have left behind."""
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def test_the_group_is_destroyed_when_the_block_ends(joined_process_group):
    with process_group_closed_at_exit():
        assert dist.is_initialized()
    assert not dist.is_initialized()


def test_the_group_is_destroyed_when_the_block_raises(joined_process_group):
    with pytest.raises(SystemExit), process_group_closed_at_exit():
        raise SystemExit(1)
    assert not dist.is_initialized()


def test_a_process_that_joined_no_group_exits_quietly():
    with process_group_closed_at_exit():
        pass
    assert not dist.is_initialized()
