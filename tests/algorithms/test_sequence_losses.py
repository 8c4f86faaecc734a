"""GSPO and GPG, verl's loss_mode=gspo and =gpg: values and gradients worked out by hand, and
properties (GSPO is PPO when every token of a sequence has the same ratio; its micro-batches
equal the full batch: test_policy_loss.py)."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rlcore.algorithms import AGG_MODES, get_policy_loss_fn, policy_loss
from rlcore.config import load_config

gspo, gpg = get_policy_loss_fn("gspo"), get_policy_loss_fn("gpg")


def test_gspo_uses_each_sequences_geometric_mean_ratio_and_each_tokens_gradient():
    old = torch.zeros(2, 3, dtype=torch.float64)
    new = torch.tensor([[0.1, 0.3, 9.0], [-0.2, 0.0, 0.0]], dtype=torch.float64)
    new.requires_grad_()
    adv = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])  # the 9.0 is padding: it must not count
    loss, metrics = gspo(old, new, adv, mask, clip_ratio_low=0.2, clip_ratio_high=0.1)
    s0, s1 = math.exp((0.1 + 0.3) / 2), math.exp(-0.2 / 3)  # 1.2214 (clipped), 0.9355 (inside)
    by_hand = [-1.0 * min(s0, 1.1)] * 2 + [2.0 * s1] * 3  # max(-A s, -A clip(s)) per token
    assert loss.item() == pytest.approx(sum(by_hand) / 5)
    (grad,) = torch.autograd.grad(loss, new)
    # Clipped tokens (A > 0, s above 1 + high) get none; the others -A * s_i / valid tokens.
    expected = torch.tensor([[0.0, 0.0, 0.0], [2 * s1 / 5] * 3], dtype=torch.float64)
    assert torch.allclose(grad, expected)
    assert metrics["pg_clipfrac"].item() == pytest.approx(2 / 5)
    assert metrics["ppo_kl"].item() == pytest.approx(-(0.1 + 0.3 - 0.2) / 5)
    assert metrics["pg_clipfrac_lower"].item() == 0.0


@given(st.integers(1, 4), st.integers(1, 5), st.integers(0, 10_000), st.sampled_from(AGG_MODES))
def test_gspo_is_ppo_when_every_token_of_a_sequence_has_the_same_ratio(b, t, seed, mode):
    gen = torch.Generator().manual_seed(seed)
    old = torch.randn(b, t, generator=gen, dtype=torch.float64)
    shift = torch.randn(b, 1, generator=gen, dtype=torch.float64) * 0.3  # one ratio a sequence
    adv = torch.randn(b, t, generator=gen, dtype=torch.float64)
    mask = torch.ones(b, t)  # the first token of each sequence valid, the others at random
    mask[:, 1:] = (torch.rand(b, t - 1, generator=gen) < 0.7).float()
    results = []
    for fn in (gspo, policy_loss):
        new = (old + shift).requires_grad_()
        loss, _ = fn(old, new, adv, mask, loss_agg_mode=mode)
        results.append((loss, *torch.autograd.grad(loss, new)))
    assert torch.allclose(results[0][0], results[1][0])
    assert torch.allclose(results[0][1], results[1][1])


def test_gpg_is_the_plain_policy_gradient():
    old = torch.zeros(1, 3, dtype=torch.float64)
    new = torch.tensor([[-0.5, -1.0, -2.0]], dtype=torch.float64, requires_grad=True)
    adv = torch.tensor([[2.0, -1.0, 4.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0]])
    loss, metrics = gpg(old, new, adv, mask, clip_ratio_low=0.0001, clip_ratio_high=0.0001)
    assert loss.item() == pytest.approx((2.0 * 0.5 + -1.0 * 1.0) / 2)  # mean of -A log p
    (grad,) = torch.autograd.grad(loss, new)
    assert torch.allclose(grad, torch.tensor([[-1.0, 0.5, 0.0]], dtype=torch.float64))
    assert metrics["pg_clipfrac"].item() == 0.0  # no clip, however narrow the band
    assert metrics["ppo_kl"].item() == pytest.approx((0.5 + 1.0) / 2)


def test_the_losses_are_chosen_by_config_in_verls_spelling_too(capsys):
    for spelling in (
        "algorithm.policy_loss=gspo",
        "+actor_rollout_ref.actor.policy_loss.loss_mode=gspo",
    ):
        config = load_config("reasoning/tiny_arith_ppo", [spelling])
        assert config.algorithm.policy_loss == "gspo"
    assert (
        load_config("embodied/cartpole_ppo", ["algorithm.policy_loss=gpg"]).algorithm.policy_loss
        == "gpg"
    )
