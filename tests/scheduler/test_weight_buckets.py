"""Weights in buckets (``rlcore/scheduler/weight_buckets.py``): the cut, and bytes in and out."""

import torch
from hypothesis import given
from hypothesis import strategies as st

from rlcore.scheduler.weight_buckets import flatten, plan_buckets, unflatten_into


@given(sizes=st.lists(st.integers(1, 300), max_size=30), limit=st.integers(1, 400))
def test_buckets_keep_the_order_and_are_full_but_never_over_the_limit(sizes, limit):
    entries = [(f"t{i:02d}", (n,), "torch.uint8", n) for i, n in enumerate(sizes)]
    size = dict((name, n) for name, _, _, n in entries)
    cut = plan_buckets(entries, limit)
    assert [name for bucket in cut for name in bucket] == [e[0] for e in entries]
    for i, bucket in enumerate(cut):
        total = sum(size[n] for n in bucket)
        assert total <= limit or len(bucket) == 1  # only a lone tensor may be larger
        if i + 1 < len(cut):  # greedy: the next tensor did not fit
            assert total + size[cut[i + 1][0]] > limit


def test_a_flattened_bucket_of_mixed_dtypes_comes_back_bit_for_bit():
    gen = torch.Generator().manual_seed(0)
    bucket = {
        "w": torch.randn(3, 4, generator=gen),
        "h": torch.randn(5, generator=gen).to(torch.bfloat16),
        "n": torch.tensor(7, dtype=torch.int64),
        "t": torch.randn(4, 3, generator=gen).t(),  # not contiguous
    }
    flat = flatten(bucket)
    assert flat.dtype == torch.uint8
    assert flat.numel() == sum(t.numel() * t.element_size() for t in bucket.values())
    targets = [torch.zeros_like(t) for t in bucket.values()]
    unflatten_into(flat.clone(), targets)
    for target, tensor in zip(targets, bucket.values(), strict=True):
        assert torch.equal(target, tensor)
