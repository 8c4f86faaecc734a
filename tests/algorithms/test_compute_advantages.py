"""The advantage stage both drivers share: estimator by name, whitening once, embodied extras."""

import pytest
import torch

from rlcore.algorithms import (
    AdaptiveKLController,
    apply_kl_penalty,
    bootstrap_truncations,
    compute_advantages,
    compute_reinforce_plus_plus_advantage,
    kl_penalty,
    scores_to_token_rewards,
)

GEN = torch.Generator().manual_seed(0)
REWARDS = torch.randn(4, 5, generator=GEN)
MASK = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 0, 0, 0]])


def test_estimators_that_whiten_their_output_are_not_whitened_again():
    own, _ = compute_reinforce_plus_plus_advantage(REWARDS, MASK, gamma=0.9)
    staged, _ = compute_advantages("reinforce_plus_plus", REWARDS, MASK, normalize=True, gamma=0.9)
    assert torch.equal(staged, own)


def test_normalize_whitens_gae_over_the_valid_positions_of_the_whole_batch():
    values = torch.randn(4, 5, generator=GEN)
    raw, returns = compute_advantages(
        "gae", REWARDS, MASK, normalize=False, values=values, gamma=0.9, lam=0.8
    )
    white, same_returns = compute_advantages(
        "gae", REWARDS, MASK, normalize=True, values=values, gamma=0.9, lam=0.8
    )
    valid = MASK.bool()
    assert torch.equal(returns, same_returns)  # returns are never whitened
    assert white[valid].mean().item() == pytest.approx(0.0, abs=1e-6)
    assert white[valid].std().item() == pytest.approx(1.0, abs=1e-6)  # unbiased, as verl
    assert (white[~valid] == 0).all()
    # whitening is affine: the order of the valid advantages is kept
    assert torch.equal(white[valid].argsort(), raw[valid].argsort())


def test_episode_ends_go_only_to_episodic_estimators():
    with pytest.raises(ValueError, match="'grpo' cannot take episode ends"):
        compute_advantages(
            "grpo", REWARDS, MASK, normalize=False, index=[0, 0, 1, 1], dones=torch.zeros(4, 5)
        )


def test_a_time_limit_credits_the_final_value_and_a_terminal_state_does_not():
    rewards = torch.tensor([[1.0, 1.0, 1.0]])
    next_values = torch.tensor([[5.0, 6.0, 7.0]])
    terminated = torch.tensor([[False, True, False]])
    truncated = torch.tensor([[False, False, True]])
    out = bootstrap_truncations(rewards, next_values, terminated, truncated, gamma=0.5)
    assert out.tolist() == [[1.0, 1.0, 1.0 + 0.5 * 7.0]]
    # RLinf's bootstrap_type: always: the terminated step is credited with its final value too
    out = bootstrap_truncations(
        rewards, next_values, terminated, truncated, gamma=0.5, at_termination=True
    )
    assert out.tolist() == [[1.0, 1.0 + 0.5 * 6.0, 1.0 + 0.5 * 7.0]]


def test_scores_land_on_each_responses_last_token_and_the_kl_is_paid_on_every_token():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    rewards = scores_to_token_rewards(torch.tensor([2.0, -1.0]), mask)
    assert rewards.tolist() == [[0, 0, 2.0, 0], [-1.0, 0, 0, 0]]
    old = torch.tensor([[-1.0, -2.0, -0.5, -9.0], [-1.0, -9.0, -9.0, -9.0]])
    ref = torch.tensor([[-1.5, -1.0, -0.5, 0.0], [-3.0, 0.0, 0.0, 0.0]])
    ctrl = AdaptiveKLController(0.1, target_kl=0.5, horizon=10)
    paid, mean_kl = apply_kl_penalty(rewards, old, ref, mask, ctrl, "kl")
    kl = (old - ref) * mask  # k1 = log p - log q, masked
    assert torch.allclose(paid, rewards - 0.1 * kl)
    per_sequence = [(0.5 - 1.0 + 0.0) / 3, 2.0 / 1]
    assert mean_kl == pytest.approx(sum(per_sequence) / 2)
    error = max(min(mean_kl / 0.5 - 1, 0.2), -0.2)
    assert ctrl.value == pytest.approx(0.1 * (1 + error * 2 / 10))
    assert torch.equal(kl_penalty(old, ref, "kl") * mask, kl)
