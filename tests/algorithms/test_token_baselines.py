"""ReMax and the optimal token baselines (verl's ``remax``, ``optimal_token_baseline``,
``tir_optimal_token_baseline``) on hand-worked cases, and against a looped second
implementation written from the definitions."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rlcore.algorithms import compute_advantages, get_advantage_fn


def outcome(scores, lengths, width=None):
    """Token rewards with each score on the last valid token, and the prefix mask."""
    t = width or max(lengths)
    rewards, mask = torch.zeros(len(scores), t, dtype=torch.float64), torch.zeros(len(scores), t)
    for i, (s, n) in enumerate(zip(scores, lengths, strict=True)):
        mask[i, :n] = 1
        if n:
            rewards[i, n - 1] = s
    return rewards, mask


def close(got, want):
    return torch.allclose(got, torch.tensor(want, dtype=got.dtype), atol=1e-6)


def test_remax_subtracts_the_greedy_responses_score_from_the_reward_to_go():
    rewards, mask = outcome([1.0, 0.0, 2.0], [2, 3, 1], width=3)
    rewards[1, 0] = -0.5  # a per-token reward (a KL penalty) before the last one
    baselines = torch.tensor([0.25, 0.25, 1.0], dtype=torch.float64)
    adv, ret = get_advantage_fn("remax")(rewards, mask, reward_baselines=baselines)
    assert ret.tolist() == [[1.0, 1.0, 0.0], [-0.5, 0.0, 0.0], [2.0, 0.0, 0.0]]
    assert adv.tolist() == [[0.75, 0.75, 0.0], [-0.75, -0.25, -0.25], [1.0, 0.0, 0.0]]
    with pytest.raises(ValueError, match="remax needs reward_baselines"):
        get_advantage_fn("remax")(rewards, mask)


def otb_inputs(probs, spread):
    """``old_log_probs`` from the sampled tokens' probabilities and ``sum_pi_squared``."""
    return torch.tensor(probs).log(), torch.tensor(spread)


def test_otb_weights_each_step_by_the_paths_cumulative_variance():
    # w_t = 1 - 2 pi_t + sum pi^2: row a's tokens had pi 0.5 of two equally likely ones
    # (w = 0.5 per step, W = [0.5, 1]); row b's were certain (pi 1, sum pi^2 1: w = 0, W = 0),
    # so b carries no weight and the baseline at every step is a's return, 1.
    rewards, mask = outcome([1.0, 0.0], [2, 2])
    logp, spread = otb_inputs([[0.5, 0.5], [1.0, 1.0]], [[0.5, 0.5], [1.0, 1.0]])
    fn = get_advantage_fn("optimal_token_baseline")
    adv, ret = fn(rewards, mask, index=[0, 0], old_log_probs=logp, sum_pi_squared=spread)
    assert ret.tolist() == [[1.0, 1.0], [0.0, 0.0]]
    assert close(adv, [[0.0, 0.0], [-1.0, -1.0]])
    # equal weights: the baseline is the group mean of the returns at each step
    logp, spread = otb_inputs([[0.5, 0.5], [0.5, 0.5]], [[0.5, 0.5], [0.5, 0.5]])
    adv, _ = fn(rewards, mask, index=[0, 0], old_log_probs=logp, sum_pi_squared=spread)
    assert close(adv, [[0.5, 0.5], [-0.5, -0.5]])


def test_otb_baseline_at_a_step_counts_only_the_paths_still_running():
    # a: 3 tokens, return 3; b: 1 token, return 1; every w = 0.5, so W = 0.5 t.
    rewards, mask = outcome([3.0, 1.0], [3, 1])
    logp, spread = otb_inputs([[0.5] * 3] * 2, [[0.5] * 3] * 2)
    fn = get_advantage_fn("optimal_token_baseline")
    kw = {"index": [0, 0], "old_log_probs": logp, "sum_pi_squared": spread}
    adv, _ = fn(rewards, mask, handle_zero_tail=False, **kw)
    b0 = (3 * 0.5 + 1 * 0.5) / (0.5 + 0.5 + 1e-8)  # step 0: both paths
    b1 = 3 * 1.0 / (1.0 + 1e-8)  # steps 1, 2: only a
    assert close(adv, [[3 - b0, 3 - b1, 3 - b1], [1 - b0, 0.0, 0.0]])
    # handle_zero_tail: the one longest path's steps past the second longest get no baseline
    adv, _ = fn(
        rewards,
        mask,
        index=[0, 0],
        old_log_probs=logp,
        sum_pi_squared=spread,
        handle_zero_tail=True,
    )
    assert close(adv, [[3 - b0, 3.0, 3.0], [1 - b0, 0.0, 0.0]])


def looped_otb(rewards, mask, index, logp, spread, zero_tail, compact, eps=1e-8):
    """The definitions, one row and one step at a time: ``G_t`` the reward-to-go, ``W_t`` the
    cumulative ``1 - 2 pi + sum pi^2`` over the path's tokens, per group and (compacted) step
    ``b_t = sum G W / (sum W + eps)`` over the paths that reach it."""
    B = len(rewards)
    paths = []  # per row: positions, G and W along its valid tokens
    for i in range(B):
        pos = [t for t in range(rewards.shape[1]) if mask[i, t]]
        g = [sum(rewards[i, u].item() for u in pos if u >= t) for t in pos]
        w, acc = [], 0.0
        for t in pos:
            acc += 1 - 2 * math.exp(logp[i, t].item()) + spread[i, t].item()
            w.append(acc)
        paths.append((pos, g, w))
    adv = torch.zeros_like(rewards)
    for group in set(index):
        rows = [i for i in range(B) if index[i] == group and (paths[i][0] or not compact)]
        for i in rows:
            pos, g, w = paths[i]
            for k, t in enumerate(pos):
                step = k if compact else t  # TIR: the k-th valid token; OTB: position t
                peers = []  # (row, where along that row's path this step is)
                for j in rows:
                    if compact and step < len(paths[j][0]):
                        peers.append((j, step))
                    elif not compact and step in paths[j][0]:
                        peers.append((j, paths[j][0].index(step)))
                num = sum(paths[j][1][q] * paths[j][2][q] for j, q in peers)
                den = sum(paths[j][2][q] for j, q in peers) + eps
                base = num / den if len(rows) > 1 else 0.0
                lengths = sorted(len(paths[j][0]) for j in rows)
                unique_longest = len(rows) > 1 and lengths[-1] > lengths[-2]
                if zero_tail and unique_longest and len(pos) == lengths[-1] and step >= lengths[-2]:
                    base = 0.0
                adv[i, t] = g[k] - base
    return adv


@given(
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    seed=st.integers(0, 10_000),
    zero_tail=st.booleans(),
    holes=st.booleans(),
)
def test_otb_and_tir_equal_a_looped_implementation(sizes, seed, zero_tail, holes):
    gen = torch.Generator().manual_seed(seed)
    B, T = sum(sizes), 5
    index = [g for g, n in enumerate(sizes) for _ in range(n)]
    lengths = torch.randint(0, T + 1, (B,), generator=gen)
    mask = (torch.arange(T) < lengths[:, None]).double()
    if holes:  # tool-output tokens inside a multi-turn response: TIR compacts them away
        mask = mask * (torch.rand(B, T, generator=gen) > 0.3)
    rewards = torch.randn(B, T, generator=gen, dtype=torch.float64) * mask
    probs = torch.rand(B, T, generator=gen, dtype=torch.float64) * 0.9 + 0.05
    spread = probs**2 + torch.rand(B, T, generator=gen, dtype=torch.float64) * (1 - probs) ** 2
    logp = probs.log()
    for name, compact in (("optimal_token_baseline", False), ("tir_optimal_token_baseline", True)):
        if holes and not compact:
            continue  # OTB indexes steps by position; with holes only TIR is defined by steps
        fn = get_advantage_fn(name)
        adv, ret = fn(
            rewards,
            mask,
            index=index,
            old_log_probs=logp,
            sum_pi_squared=spread,
            handle_zero_tail=zero_tail,
        )
        want = looped_otb(rewards, mask, index, logp, spread, zero_tail, compact)
        assert torch.allclose(adv, want, atol=1e-9), name
        assert torch.all(adv[mask == 0] == 0) and torch.all(ret[mask == 0] == 0)


def test_both_default_to_zeroing_the_tail_as_verl_0_9_1_does():
    # verl 0.9.1: handle_zero_tail=True in both functions' signatures, and its trainer passes
    # none: the one longest path's steps past the second longest get b = 0, A = G = 3
    rewards, mask = outcome([3.0, 1.0], [3, 1])
    logp, spread = otb_inputs([[0.5] * 3] * 2, [[0.5] * 3] * 2)
    kw = {"index": [0, 0], "old_log_probs": logp, "sum_pi_squared": spread}
    for name in ("tir_optimal_token_baseline", "optimal_token_baseline"):
        fn = get_advantage_fn(name)
        assert fn(rewards, mask, **kw)[0][0, 1:].tolist() == [3.0, 3.0], name
        assert close(fn(rewards, mask, handle_zero_tail=False, **kw)[0][0, 1:], [0.0, 0.0])


def test_compute_advantages_hands_an_estimator_the_inputs_it_declares():
    rewards, mask = outcome([1.0, 0.0], [2, 2])
    logp, spread = otb_inputs([[0.5, 0.5], [0.5, 0.5]], [[0.5, 0.5], [0.5, 0.5]])
    inputs = {
        "old_log_probs": logp,
        "sum_pi_squared": spread,
        "reward_baselines": torch.tensor([0.5, 0.5], dtype=torch.float64),
    }
    otb, _ = compute_advantages(
        "optimal_token_baseline", rewards, mask, normalize=False, index=[0, 0], inputs=inputs
    )
    assert close(otb, [[0.5, 0.5], [-0.5, -0.5]])
    remax, _ = compute_advantages("remax", rewards, mask, normalize=False, inputs=inputs)
    assert remax.tolist() == [[0.5, 0.5], [-0.5, -0.5]]
    with pytest.raises(ValueError, match="'optimal_token_baseline' needs sum_pi_squared"):
        compute_advantages(
            "optimal_token_baseline",
            rewards,
            mask,
            normalize=False,
            index=[0, 0],
            inputs={"old_log_probs": logp},
        )


@pytest.mark.parametrize("name", ["optimal_token_baseline", "tir_optimal_token_baseline"])
def test_rollout_importance_weights_scale_each_tokens_weight_by_their_square(name):
    # a group of 2, one token each, rewards 1 and 0; pi = 0.5 and sum pi^2 = 0.5 give
    # w = 1 - 1 + 0.5 = 0.5 for both: b = (1 * 0.5 + 0) / 1 = 0.5, A = (0.5, -0.5). With
    # rho = (2, 1) (verl's rollout_is_weights) w becomes (0.5 * 4, 0.5): b = 2 / 2.5 = 0.8
    fn = get_advantage_fn(name)
    inputs = dict(
        index=[0, 0],
        old_log_probs=torch.log(torch.full((2, 1), 0.5)),
        sum_pi_squared=torch.full((2, 1), 0.5),
    )
    rewards, mask = torch.tensor([[1.0], [0.0]]), torch.ones(2, 1)
    plain, _ = fn(rewards, mask, **inputs)
    weighted, returns = fn(rewards, mask, rollout_is_weights=torch.tensor([[2.0], [1.0]]), **inputs)
    assert plain.flatten().tolist() == pytest.approx([0.5, -0.5])
    assert weighted.flatten().tolist() == pytest.approx([0.2, -0.8])
    assert returns.flatten().tolist() == [1.0, 0.0]
