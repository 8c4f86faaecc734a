import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rlcore.algorithms import compute_gae, get_advantage_fn


def test_gae_hand_computed_three_steps():
    r = torch.tensor([[1.0, 0.0, 2.0]])
    v = torch.tensor([[0.5, 1.0, 1.5]])
    gamma, lam = 0.9, 0.8
    # deltas: t2 = 2 - 1.5 = 0.5 (no value after the end)
    #         t1 = 0 + 0.9 * 1.5 - 1.0 = 0.35
    #         t0 = 1 + 0.9 * 1.0 - 0.5 = 1.4
    # A2 = 0.5; A1 = 0.35 + 0.72 * 0.5 = 0.71; A0 = 1.4 + 0.72 * 0.71 = 1.9112
    adv, ret = compute_gae(r, torch.ones(1, 3), values=v, gamma=gamma, lam=lam)
    assert adv.tolist()[0] == pytest.approx([1.9112, 0.71, 0.5])
    assert ret.tolist()[0] == pytest.approx([1.9112 + 0.5, 0.71 + 1.0, 0.5 + 1.5])


def test_gamma_lambda_one_gives_reward_to_go_minus_value():
    r = torch.tensor([[0.0, 1.0, 0.0, 3.0]])
    v = torch.tensor([[0.2, -0.4, 1.0, 2.0]])
    adv, ret = compute_gae(r, torch.ones(1, 4), values=v, gamma=1.0, lam=1.0)
    to_go = torch.tensor([[4.0, 4.0, 3.0, 3.0]])
    assert torch.allclose(adv, to_go - v)
    assert torch.allclose(ret, to_go)


def test_lambda_zero_gives_one_step_td():
    r = torch.tensor([[1.0, -1.0, 0.5]])
    v = torch.tensor([[0.3, 0.7, -0.2]])
    gamma = 0.95
    adv, _ = compute_gae(r, torch.ones(1, 3), values=v, gamma=gamma, lam=0.0)
    expected = [1.0 + gamma * 0.7 - 0.3, -1.0 + gamma * -0.2 - 0.7, 0.5 - -0.2]
    assert adv.tolist()[0] == pytest.approx(expected)


def test_extra_value_column_bootstraps_a_cut_off_row():
    r = torch.tensor([[1.0, 1.0]])
    v = torch.tensor([[0.0, 0.0, 10.0]])  # V(s_2) = 10: the episode goes on after the rollout
    adv, _ = compute_gae(r, torch.ones(1, 2), values=v, gamma=0.5, lam=0.0)
    assert adv.tolist()[0] == pytest.approx([1.0, 1.0 + 0.5 * 10.0])


def test_done_cuts_the_chain_like_two_separate_episodes():
    gamma, lam = 0.9, 0.7
    r = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0]])
    v = torch.tensor([[0.1, 0.2, 0.3, 0.4, 0.5, 0.6]])
    dones = torch.tensor([[0, 1, 0, 0, 0]])
    adv, _ = compute_gae(r, torch.ones(1, 5), values=v, gamma=gamma, lam=lam, dones=dones)
    first, _ = compute_gae(r[:, :2], torch.ones(1, 2), values=v[:, :2], gamma=gamma, lam=lam)
    second, _ = compute_gae(r[:, 2:], torch.ones(1, 3), values=v[:, 2:], gamma=gamma, lam=lam)
    assert torch.allclose(adv, torch.cat([first, second], dim=1))


def test_left_and_right_padding_give_the_same_advantages():
    r = torch.tensor([[0.0, 0.0, 1.0]])
    v = torch.tensor([[0.4, 0.5, 0.6]])
    pad = torch.tensor([[7.0, 7.0]])
    right_adv, _ = compute_gae(
        torch.cat([r, pad], 1), torch.tensor([[1, 1, 1, 0, 0]]), values=torch.cat([v, pad], 1)
    )
    left_adv, _ = compute_gae(
        torch.cat([pad, r], 1), torch.tensor([[0, 0, 1, 1, 1]]), values=torch.cat([pad, v], 1)
    )
    assert torch.allclose(right_adv[:, :3], left_adv[:, 2:])
    assert (right_adv[:, 3:] == 0).all() and (left_adv[:, :2] == 0).all()


@given(
    st.lists(st.floats(-5, 5), min_size=1, max_size=8),
    st.lists(st.booleans(), min_size=1, max_size=16),
    st.floats(0.0, 1.0),
    st.floats(0.0, 1.0),
    st.integers(0, 2**16),
)
def test_masked_holes_do_not_change_valid_advantages(rewards, holes, gamma, lam, seed):
    """Inserting masked steps with garbage anywhere leaves every valid step's advantage as is."""
    gen = torch.Generator().manual_seed(seed)
    n = len(rewards)
    r = torch.tensor([rewards], dtype=torch.float64)
    v = torch.randn(1, n, generator=gen, dtype=torch.float64)
    compact_adv, compact_ret = compute_gae(r, torch.ones(1, n), values=v, gamma=gamma, lam=lam)

    layout = [True] * n + [False] * sum(not h for h in holes)
    order = torch.randperm(len(layout), generator=gen)
    valid = torch.tensor(layout)[order]
    wide_r = torch.full((1, len(layout)), float("nan"), dtype=torch.float64)
    wide_v = torch.full((1, len(layout)), float("inf"), dtype=torch.float64)
    wide_r[0, valid], wide_v[0, valid] = r[0], v[0]
    adv, ret = compute_gae(wide_r, valid[None], values=wide_v, gamma=gamma, lam=lam)
    assert torch.allclose(adv[0, valid], compact_adv[0])
    assert torch.allclose(ret[0, valid], compact_ret[0])
    assert (adv[0, ~valid] == 0).all()


def test_gae_without_values_says_what_is_missing():
    with pytest.raises(ValueError, match="value head"):
        get_advantage_fn("gae")(torch.zeros(1, 2), torch.ones(1, 2))


def test_gae_rejects_values_of_the_wrong_length():
    with pytest.raises(ValueError, match=r"\[B, T\] or \[B, T \+ 1\]"):
        compute_gae(torch.zeros(1, 3), torch.ones(1, 3), values=torch.zeros(1, 5))


def literal_gae(r, v, mask, dones, bootstrap, gamma, lam):
    """The recurrence exactly as specified, one scalar at a time: an independent reference."""
    B, T = r.shape
    adv = torch.zeros(B, T, dtype=torch.float64)
    for b in range(B):
        next_value, next_adv = float(bootstrap[b]), 0.0
        for t in reversed(range(T)):
            if not mask[b, t]:
                continue  # the running value and advantage carry over unchanged
            not_done = 1.0 - float(dones[b, t])
            delta = float(r[b, t]) + gamma * next_value * not_done - float(v[b, t])
            next_adv = delta + gamma * lam * not_done * next_adv
            next_value = float(v[b, t])
            adv[b, t] = next_adv
    return adv


@given(
    st.integers(1, 4),
    st.integers(1, 12),
    st.floats(0.0, 1.0),
    st.floats(0.0, 1.0),
    st.booleans(),
    st.integers(0, 2**16),
)
def test_matches_the_literal_recurrence_with_holes_dones_and_bootstrap(
    b, t, gamma, lam, bootstrap, seed
):
    gen = torch.Generator().manual_seed(seed)
    r = torch.randn(b, t, generator=gen, dtype=torch.float64)
    v = torch.randn(b, t + 1, generator=gen, dtype=torch.float64)
    mask = torch.rand(b, t, generator=gen) < 0.75
    dones = torch.rand(b, t, generator=gen) < 0.2
    values = v if bootstrap else v[:, :t]
    adv, ret = compute_gae(r, mask, values=values, gamma=gamma, lam=lam, dones=dones)
    expected = literal_gae(r, v, mask, dones, v[:, t] if bootstrap else torch.zeros(b), gamma, lam)
    assert torch.allclose(adv, expected)
    assert torch.allclose(ret, torch.where(mask, expected + v[:, :t], 0.0))
