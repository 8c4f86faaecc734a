"""Helpers for the tests that split a mini-batch into micro-batches."""

import itertools

import pytest
import torch
from hypothesis import strategies as st

from rlcore.algorithms import count_seqs, count_tokens


def micro_batch_sum(loss_fn, tensors, mask, cuts, mode):
    """Sum of ``loss_fn`` over the micro-batches between ``cuts``, with mini-batch counts."""
    counts = {"num_tokens": count_tokens(mask), "num_seqs": count_seqs(mask)}
    bounds = [0, *cuts, mask.shape[0]]
    return sum(
        loss_fn(*(t[a:b] for t in tensors), mask[a:b], mode, **counts)
        for a, b in itertools.pairwise(bounds)
        if b > a
    )


@st.composite
def split_batches(draw):
    b = draw(st.integers(1, 8))
    t = draw(st.integers(1, 6))
    seed = draw(st.integers(0, 2**16))
    cuts = sorted(set(draw(st.lists(st.integers(1, max(b - 1, 1)), max_size=3))) - {b})
    return b, t, seed, [c for c in cuts if c < b]


def assert_micro_batches_match_full_batch(loss_fn, tensors, wrt, mask, cuts, mode):
    """Loss and gradient w.r.t. ``tensors[wrt]``: micro-batch sum == full batch, to 1e-12."""
    full = loss_fn(*tensors, mask, mode)
    (full_grad,) = torch.autograd.grad(full, tensors[wrt])
    micro = micro_batch_sum(loss_fn, tensors, mask, cuts, mode)
    (micro_grad,) = torch.autograd.grad(micro, tensors[wrt])
    assert micro.item() == pytest.approx(full.item(), abs=1e-12)
    assert torch.allclose(micro_grad, full_grad, atol=1e-12)
