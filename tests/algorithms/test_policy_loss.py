import math

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from rlcore.algorithms import (
    AGG_MODES,
    get_policy_loss_fn,
    policy_loss,
    register_policy_loss,
)
from rlcore.algorithms.policy_loss import POLICY_LOSSES
from tests.algorithms.microbatching import assert_micro_batches_match_full_batch, split_batches


def one_token(ratio, advantage, **kwargs):
    """Policy loss and metrics for a single token with the given ratio and advantage."""
    log_prob = torch.tensor([[math.log(ratio)]], dtype=torch.float64, requires_grad=True)
    loss, metrics = policy_loss(
        torch.zeros(1, 1, dtype=torch.float64),
        log_prob,
        torch.tensor([[advantage]], dtype=torch.float64),
        torch.ones(1, 1),
        **kwargs,
    )
    (grad,) = torch.autograd.grad(loss, log_prob)
    return loss.item(), {k: v.item() for k, v in metrics.items()}, grad.item()


def test_inside_the_band_the_loss_is_the_plain_surrogate():
    loss, metrics, grad = one_token(1.1, 2.0)
    assert loss == pytest.approx(-2.0 * 1.1)
    assert grad == pytest.approx(-2.0 * 1.1)  # d(-A r)/d log p = -A r
    assert metrics["pg_clipfrac"] == 0.0


def test_positive_advantage_is_clipped_above_at_one_plus_high():
    loss, metrics, grad = one_token(1.5, 2.0, clip_ratio_high=0.3)
    assert loss == pytest.approx(-2.0 * 1.3)
    assert grad == 0.0
    assert metrics["pg_clipfrac"] == 1.0


def test_negative_advantage_is_clipped_below_at_one_minus_low():
    loss, metrics, grad = one_token(0.5, -1.0, clip_ratio_low=0.1)
    assert loss == pytest.approx(1.0 * 0.9)
    assert grad == 0.0
    assert metrics["pg_clipfrac"] == 1.0


def test_negative_advantage_with_large_ratio_is_not_clipped_without_dual_clip():
    loss, metrics, _ = one_token(5.0, -1.0)
    assert loss == pytest.approx(5.0)
    assert metrics["pg_clipfrac"] == 0.0 and metrics["pg_clipfrac_lower"] == 0.0


def test_dual_clip_caps_negative_advantage_loss_at_c():
    loss, metrics, grad = one_token(5.0, -1.0, clip_ratio_c=3.0)
    assert loss == pytest.approx(3.0)
    assert grad == 0.0
    assert metrics["pg_clipfrac_lower"] == 1.0


def test_dual_clip_leaves_positive_advantages_alone():
    loss, metrics, _ = one_token(5.0, 1.0, clip_ratio_c=3.0)
    assert loss == pytest.approx(-1.2)
    assert metrics["pg_clipfrac_lower"] == 0.0


def test_log_ratio_is_clamped_so_the_loss_stays_finite():
    loss, _ = policy_loss(
        torch.tensor([[-200.0]]), torch.tensor([[0.0]]), torch.tensor([[-1.0]]), torch.ones(1, 1)
    )
    assert loss.item() == pytest.approx(math.exp(20.0), rel=1e-6)


def test_ppo_kl_is_the_mean_of_old_minus_new_over_valid_tokens():
    old = torch.tensor([[0.0, -1.0, 5.0]])
    new = torch.tensor([[-0.5, -0.5, 0.0]])
    _, metrics = policy_loss(old, new, torch.ones(1, 3), torch.tensor([[1, 1, 0]]))
    assert metrics["ppo_kl"].item() == pytest.approx((0.5 + -0.5) / 2)


@given(
    st.lists(
        st.tuples(st.floats(-2.5, 2.5), st.floats(-3, 3).filter(lambda a: abs(a) > 1e-3)),
        min_size=1,
        max_size=12,
    ),
    st.floats(0.05, 0.5),
    st.floats(0.05, 0.5),
    st.one_of(st.none(), st.floats(1.6, 4.0)),
)
def test_gradient_is_zero_exactly_where_a_clip_binds(tokens, low, high, c):
    log_ratio = torch.tensor([[lr for lr, _ in tokens]], dtype=torch.float64)
    adv = torch.tensor([[a for _, a in tokens]], dtype=torch.float64)
    ratio = log_ratio.exp()
    # Stay away from the kinks, where the one-sided derivative is ambiguous.
    edges = [1 - low, 1 + high] + ([c] if c is not None else [])
    assume(all(abs(r - e) > 1e-6 for r in ratio.flatten().tolist() for e in edges))
    binds = ((adv > 0) & (ratio > 1 + high)) | ((adv < 0) & (ratio < 1 - low))
    if c is not None:
        binds |= (adv < 0) & (ratio > c)

    log_prob = log_ratio.clone().requires_grad_(True)
    loss, metrics = policy_loss(
        torch.zeros_like(log_ratio),
        log_prob,
        adv,
        torch.ones_like(adv),
        clip_ratio_low=low,
        clip_ratio_high=high,
        clip_ratio_c=c,
    )
    (grad,) = torch.autograd.grad(loss, log_prob)
    assert torch.equal(grad == 0, binds)
    n = adv.numel()
    taken = metrics["pg_clipfrac"].item() + metrics["pg_clipfrac_lower"].item()
    assert taken == pytest.approx(binds.sum().item() / n)


@given(
    split_batches(),
    st.sampled_from(AGG_MODES),
    st.one_of(st.none(), st.just(3.0)),
    st.sampled_from(["ppo", "gspo"]),  # gspo: its ratio is per sequence, rows stay whole
)
def test_micro_batched_policy_loss_equals_the_full_batch(batch, mode, c, name):
    b, t, seed, cuts = batch
    gen = torch.Generator().manual_seed(seed)
    old = torch.randn(b, t, generator=gen, dtype=torch.float64) * 0.3
    new = (old + torch.randn(b, t, generator=gen, dtype=torch.float64) * 0.3).requires_grad_()
    adv = torch.randn(b, t, generator=gen, dtype=torch.float64)
    mask = torch.rand(b, t, generator=gen) < 0.7

    fn = get_policy_loss_fn(name)

    def loss_fn(o, n, a, m, agg, **counts):
        return fn(o, n, a, m, clip_ratio_c=c, loss_agg_mode=agg, **counts)[0]

    assert_micro_batches_match_full_batch(loss_fn, (old, new, adv), 1, mask, cuts, mode)


def test_ppo_is_the_registered_default_and_custom_losses_can_be_added():
    assert get_policy_loss_fn("ppo") is policy_loss
    name = "test_only_reinforce"

    @register_policy_loss(name)
    def reinforce(
        old_log_prob,
        log_prob,
        advantages,
        response_mask,
        *,
        clip_ratio_low=0.2,
        clip_ratio_high=0.2,
        clip_ratio_c=None,
        loss_agg_mode="token-mean",
        num_tokens=None,
        num_seqs=None,
        rollout_is_weights=None,
    ):
        return -(advantages * log_prob).mean(), {}

    try:
        assert get_policy_loss_fn(name) is reinforce
    finally:
        POLICY_LOSSES._entries.pop(name)

    def no_weights(  # (written before the rollout correction: no rollout_is_weights)
        old_log_prob,
        log_prob,
        advantages,
        response_mask,
        *,
        clip_ratio_low=0.2,
        clip_ratio_high=0.2,
        clip_ratio_c=None,
        loss_agg_mode="token-mean",
        num_tokens=None,
        num_seqs=None,
    ):
        return reinforce(old_log_prob, log_prob, advantages, response_mask)

    # a loss that lacks a keyword rlcore passes is refused at registration, naming it
    with pytest.raises(TypeError, match="must accept the keyword arguments rollout_is_weights"):
        register_policy_loss("test_only_lacks_weights")(no_weights)
    assert "test_only_lacks_weights" not in POLICY_LOSSES
    with pytest.raises(KeyError, match="did you mean 'ppo'"):
        get_policy_loss_fn("pop")
