"""Typed handles dispatch each method over a component's ranks as its @dispatch mode says."""

import pytest
import torch
from tensordict import TensorDict

from rlcore.scheduler.dispatch import Dispatch, dispatch
from rlcore.scheduler.handles import remote_handle


class Counter:
    """A component whose methods return what each rank saw."""

    def __init__(self, rank):
        self.rank = rank

    @dispatch(Dispatch.SHARD)
    def double(self, batch):
        return TensorDict(
            {"x": batch["x"] * 2, "rank": torch.full_like(batch["x"], self.rank)},
            batch_size=batch.batch_size,
        )

    @dispatch(Dispatch.SHARD_REDUCED)
    def total(self, batch):
        return {"rank": self.rank, "rows": len(batch)}

    @dispatch(Dispatch.GATHER)
    def own_rows(self, n):
        return torch.full((n,), self.rank)

    @dispatch(Dispatch.RANK0)
    def describe(self):
        return f"rank {self.rank}"

    def everywhere(self, value):  # no decorator: ALL
        return value + self.rank


class FakeGroup:
    """The WorkerGroup calls a handle makes, run in this process; records who was called."""

    component = "counter"

    def __init__(self, world):
        self.objects = [Counter(r) for r in range(world)]
        self.calls = []

    @property
    def world_size(self):
        return len(self.objects)

    # the calls run at once, here; their "refs" are the answers, which get() hands back
    def scatter_async(self, method, shards, *args, **kwargs):
        self.calls.append((method, list(range(len(shards)))))
        return [
            getattr(o, method)(s, *args, **kwargs)
            for o, s in zip(self.objects, shards, strict=True)
        ]

    def call_all_async(self, method, *args, **kwargs):
        self.calls.append((method, list(range(self.world_size))))
        return [getattr(o, method)(*args, **kwargs) for o in self.objects]

    def call_rank_async(self, rank, method, *args, **kwargs):
        self.calls.append((method, [rank]))
        return getattr(self.objects[rank], method)(*args, **kwargs)

    def get(self, refs, ranks=None, method=None):
        return list(refs)


def test_shard_splits_rows_in_rank_order_and_concatenates_the_results():
    group = FakeGroup(2)
    out = remote_handle(Counter, group).double(TensorDict({"x": torch.arange(6)}, batch_size=[6]))
    assert out["x"].tolist() == [0, 2, 4, 6, 8, 10]
    assert out["rank"].tolist() == [0, 0, 0, 1, 1, 1]


def test_shard_reduced_returns_rank_zeros_result_after_every_rank_ran():
    group = FakeGroup(2)
    out = remote_handle(Counter, group).total(TensorDict({"x": torch.arange(4)}, batch_size=[4]))
    assert out == {"rank": 0, "rows": 2} and group.calls == [("total", [0, 1])]


def test_gather_concatenates_and_all_returns_rank_zeros_and_rank0_calls_one_rank():
    group = FakeGroup(3)
    handle = remote_handle(Counter, group)
    assert handle.own_rows(2).tolist() == [0, 0, 1, 1, 2, 2]
    assert handle.everywhere(10) == 10 and group.calls[-1] == ("everywhere", [0, 1, 2])
    assert handle.describe() == "rank 0" and group.calls[-1] == ("describe", [0])


def test_a_batch_the_ranks_cannot_share_and_an_unknown_method_are_named():
    handle = remote_handle(Counter, FakeGroup(2))
    with pytest.raises(ValueError, match=r"counter.double: a batch of 3 cannot be split evenly"):
        handle.double(TensorDict({"x": torch.arange(3)}, batch_size=[3]))
    with pytest.raises(AttributeError, match=r"Counter has no method 'dubble' .*double"):
        handle.dubble()
