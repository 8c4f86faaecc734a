"""verl's group estimators grpo_passk, opo and gpg on hand-worked groups, and its vectorised
names against a looped second implementation."""

import math
import statistics

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rlcore.algorithms import get_advantage_fn


def outcome(scores, lengths):
    """Token rewards with each score on the last valid token, and the mask."""
    t = max(lengths)
    rewards, mask = torch.zeros(len(scores), t, dtype=torch.float64), torch.zeros(len(scores), t)
    for i, (s, n) in enumerate(zip(scores, lengths, strict=True)):
        mask[i, :n] = 1
        rewards[i, n - 1] = s
    return rewards, mask


def per_row(advantages, mask):
    """The advantage of each row (the same on every valid token), checked to be so."""
    rows = []
    for a, m in zip(advantages, mask, strict=True):
        valid = a[m.bool()]
        assert torch.all(valid == valid[0]) and torch.all(a[~m.bool()] == 0)
        rows.append(valid[0].item())
    return rows


def test_grpo_passk_teaches_only_the_best_of_each_group_by_its_lead():
    rewards, mask = outcome([0.2, 1.0, 0.5, 1.0, 1.0, 0.0], [2, 3, 1, 2, 2, 1])
    index = [0, 0, 0, 1, 1, 1]
    fn = get_advantage_fn("grpo_passk")
    lead = (1.0 - 0.5) / (statistics.stdev([0.2, 1.0, 0.5]) + 1e-6)
    got = per_row(fn(rewards, mask, index=index)[0], mask)
    assert got == pytest.approx([0.0, lead, 0.0, 0.0, 0.0, 0.0])  # group 1: a tie at the top
    raw = per_row(fn(rewards, mask, index=index, norm_adv_by_std=False)[0], mask)
    assert raw == pytest.approx([0.0, 0.5, 0.0, 0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="at least 2 responses per group"):
        fn(rewards, mask, index=[0, 0, 0, 1, 1, 2])


def test_opo_subtracts_the_length_weighted_group_mean():
    rewards, mask = outcome([1.0, 0.0, 3.0], [2, 4, 1])
    got = per_row(get_advantage_fn("opo")(rewards, mask, index=[0, 0, 1])[0], mask)
    baseline = (2 * 1.0 + 4 * 0.0) / 6
    assert got == pytest.approx([1.0 - baseline, 0.0 - baseline, 3.0])  # a group of one: b = 0


def test_gpg_scales_the_centred_score_by_the_share_of_responses_with_signal():
    rewards, mask = outcome([1.0, 0.0, 0.0, 0.0, 1.0, 0.0], [1, 2, 3, 1, 2, 3])
    got = per_row(get_advantage_fn("gpg")(rewards, mask, index=[0, 0, 0, 1, 1, 1])[0], mask)
    alpha = 6 / 2  # two of six responses scored
    up, down = alpha * (1 - 1 / 3), alpha * (0 - 1 / 3)  # each group's mean is 1/3
    assert got == pytest.approx([up, down, down, down, up, down])


def looped(name, scores, index, norm=True, eps=1e-6):
    """GRPO and RLOO the way verl's looped versions compute them, group by group."""
    out = []
    for i, s in enumerate(scores):
        group = [scores[j] for j in range(len(scores)) if index[j] == index[i]]
        n, mean = len(group), sum(group) / len(group)
        if name == "grpo":
            out.append((s - mean) / (statistics.stdev(group) + eps) if norm else s - mean)
        else:
            out.append(s * n / (n - 1) - mean * n / (n - 1))
    return out


@given(st.lists(st.integers(2, 5), min_size=1, max_size=4), st.integers(0, 10_000), st.booleans())
def test_the_vectorized_names_equal_a_looped_implementation(sizes, seed, norm):
    gen = torch.Generator().manual_seed(seed)
    index = [g for g, n in enumerate(sizes) for _ in range(n)]
    scores = torch.randint(0, 3, (len(index),), generator=gen).double().tolist()
    rewards, mask = outcome(scores, [1 + i % 3 for i in range(len(index))])
    for name in ("grpo", "rloo"):
        fn = get_advantage_fn(f"{name}_vectorized")
        got = per_row(fn(rewards, mask, index=index, norm_adv_by_std=norm)[0], mask)
        want = looped(name, scores, index, norm)
        assert all(math.isclose(a, b, abs_tol=1e-9) for a, b in zip(got, want, strict=True))


def test_rloo_vectorized_gives_a_group_of_one_nothing_where_rloo_keeps_its_score():
    # verl 0.9.1: rloo_vectorized multiplies by (count > 1); its looped rloo keeps s_i
    rewards, mask = outcome([1.0, 0.0, 3.0], [2, 1, 3])
    index = [0, 0, 1]
    vectorized = per_row(get_advantage_fn("rloo_vectorized")(rewards, mask, index=index)[0], mask)
    looped = per_row(get_advantage_fn("rloo")(rewards, mask, index=index)[0], mask)
    # the pair: each minus the other (2 / 1 * (s - 0.5))
    assert vectorized == pytest.approx([1.0, -1.0, 0.0])
    assert looped == pytest.approx([1.0, -1.0, 3.0])
