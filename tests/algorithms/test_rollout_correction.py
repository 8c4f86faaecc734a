"""The rollout correction (``rlcore/algorithms/rollout_correction.py``) against hand-computed
weights, masks and metrics, and the policy losses weighted by it."""

import math

import pytest
import torch

from rlcore.algorithms import get_policy_loss_fn
from rlcore.algorithms.rollout_correction import (
    Bounds,
    is_weights,
    parse_is_threshold,
    parse_rs,
    rejection_mask,
    rollout_correction,
)

LN = math.log
# one response of two tokens and a padding column; proximal / behaviour ratios 3 and 0.5
LOG_RATIO = torch.tensor([[LN(3.0), LN(0.5), 7.0]])
MASK = torch.tensor([[1, 1, 0]])


def test_token_weights_are_the_ratios_capped_at_the_threshold():
    weights, m = is_weights(LOG_RATIO, MASK, "token", Bounds(2.0))
    assert torch.allclose(weights, torch.tensor([[2.0, 0.5, 0.0]]))
    assert m["rollout_is_mean"] == pytest.approx(1.25)
    assert m["rollout_is_ratio_fraction_high"] == pytest.approx(0.5)  # the 3, truncated
    assert m["rollout_is_ratio_fraction_low"] == pytest.approx(0.0)  # 0.5 is not below 1/2
    # ESS: 1 / mean((w / mean w)^2) = 1 / ((1.6^2 + 0.4^2) / 2)
    assert m["rollout_is_eff_sample_size"] == pytest.approx(1 / ((1.6**2 + 0.4**2) / 2), rel=1e-5)


def test_sequence_weights_are_the_product_on_every_token():
    weights, _ = is_weights(LOG_RATIO, MASK, "sequence", Bounds(2.0))
    assert torch.allclose(weights, torch.tensor([[1.5, 1.5, 0.0]]))
    capped, _ = is_weights(LOG_RATIO * 2, MASK, "sequence", Bounds(2.0))  # 2.25 -> 2
    assert torch.allclose(capped, torch.tensor([[2.0, 2.0, 0.0]]))


def test_icepop_zeroes_weights_outside_the_interval_and_batch_normalising_divides_by_the_mean():
    weights, m = is_weights(LOG_RATIO, MASK, "token", parse_is_threshold("0.4_2.5"))
    assert torch.allclose(weights, torch.tensor([[0.0, 0.5, 0.0]]))
    assert m["rollout_is_oob_ratio"] == pytest.approx(0.5)
    _, m = is_weights(LOG_RATIO, MASK, "token", parse_is_threshold("5.0_6.0"))
    assert m["rollout_is_oob_ratio"] == 1.0 and m["rollout_is_eff_sample_size"] == 0.0
    normal, m = is_weights(LOG_RATIO, MASK, "token", Bounds(2.0), batch_normalize=True)
    assert torch.allclose(normal, torch.tensor([[1.6, 0.4, 0.0]]))
    assert m["rollout_is_batch_norm_factor"] == pytest.approx(1.25)


def test_rejection_by_token_and_by_sequence():
    # k1 = -log ratio, kept while the ratio lies in [1/2.5, 2.5]: the 3 goes, the 0.5 stays
    mask, m = rejection_mask(LOG_RATIO, MASK, parse_rs("token_k1", 2.5))
    assert mask.tolist() == [[0, 1, 0]]
    assert m["rollout_rs_masked_fraction"] == pytest.approx(0.5)
    assert m["rollout_rs_seq_masked_fraction"] == pytest.approx(1.0)
    # k3 = e^l - 1 - l: 3 - 1 - ln 3 = 0.901 and 0.5 - 1 + ln 2 = 0.193, mean 0.547
    k3 = [3 - 1 - LN(3), 0.5 - 1 + LN(2)]
    kept, _ = rejection_mask(LOG_RATIO, MASK, parse_rs("seq_mean_k3", 0.6))
    assert kept.tolist() == [[1, 1, 0]] and sum(k3) / 2 < 0.6
    gone, m = rejection_mask(LOG_RATIO, MASK, parse_rs("seq_max_k3,seq_sum_k2", "0.95,10"))
    assert gone.tolist() == [[1, 1, 0]]  # max 0.901 <= 0.95, sum of l^2/2 = 0.84 <= 10
    gone, m = rejection_mask(LOG_RATIO, MASK, parse_rs("seq_max_k3,seq_sum_k2", "0.95,0.5"))
    assert gone.tolist() == [[0, 0, 0]]  # the sum of k2 (0.84) fails: the whole response goes
    assert m["rollout_rs_seq_sum_k2_mean"] == pytest.approx((LN(3) ** 2 + LN(2) ** 2) / 2)


def test_mismatch_metrics_and_the_prefix():
    old = torch.tensor([[LN(0.6), LN(0.2), 0.0]])
    rollout = torch.tensor([[LN(0.2), LN(0.4), -9.0]])
    weights, mask, m = rollout_correction(old, rollout, MASK, rollout_is="token")
    assert mask is MASK or mask.tolist() == MASK.tolist()
    # KL(behaviour || proximal) estimated by mean(rollout - old) over the valid tokens
    assert m["rollout_corr/kl"] == pytest.approx((LN(0.2 / 0.6) + LN(0.4 / 0.2)) / 2, rel=1e-5)
    k3 = [3 - 1 - LN(3), 0.5 - 1 + LN(2)]
    assert m["rollout_corr/k3_kl"] == pytest.approx(sum(k3) / 2, rel=1e-5)
    # chi^2 per token: mean(rho^2) - 1; per sequence: (prod rho)^2 - 1
    assert m["rollout_corr/chi2_token"] == pytest.approx((9 + 0.25) / 2 - 1, rel=1e-5)
    assert m["rollout_corr/chi2_seq"] == pytest.approx(1.5**2 - 1, rel=1e-5)
    assert m["rollout_corr/training_ppl"] == pytest.approx(1 / math.sqrt(0.6 * 0.2), rel=1e-5)
    assert torch.allclose(weights, torch.tensor([[2.0, 0.5, 0.0]]))


def test_decoupled_ppo_weights_each_token_of_the_clipped_objective():
    """Behaviour 0.4, proximal 0.5, current 0.6 (ratio 1.2 against the proximal policy, inside
    the clip); A = 1 and -1: per token -w * r * A with w = 0.5 / 0.4 = 1.25."""
    loss_fn = get_policy_loss_fn("ppo")
    current = torch.tensor([[LN(0.6), LN(0.6)]])
    proximal = torch.tensor([[LN(0.5), LN(0.5)]])
    behaviour = torch.tensor([[LN(0.4), LN(0.4)]])
    adv, mask = torch.tensor([[1.0, -1.0]]), torch.ones(1, 2)
    weights, _, _ = rollout_correction(proximal, behaviour, mask, rollout_is="token")
    loss, _ = loss_fn(proximal, current, adv, mask, rollout_is_weights=weights)
    assert loss.item() == pytest.approx((-1.25 * 1.2 + 1.25 * 1.2) / 2, abs=1e-6)
    adv = torch.tensor([[1.0, 2.0]])
    loss, _ = loss_fn(proximal, current, adv, mask, rollout_is_weights=weights)
    assert loss.item() == pytest.approx(-(1.25 * 1.2 * 1 + 1.25 * 1.2 * 2) / 2, rel=1e-5)
    unweighted, _ = loss_fn(proximal, current, adv, mask)
    assert loss.item() == pytest.approx(1.25 * unweighted.item(), rel=1e-5)


@pytest.mark.parametrize("name", ["gspo", "gpg", "cispo", "sapo", "dro", "dppo_tv", "clip_cov"])
def test_every_token_loss_scales_with_uniform_weights(name):
    """Weights of 2 on every token double each token's loss (verl multiplies them in)."""
    options = {"dro_beta": 0.1}
    loss_fn = get_policy_loss_fn(name, options)
    torch.manual_seed(0)
    old = torch.log(torch.rand(3, 4) * 0.8 + 0.1)
    new = old + 0.05 * torch.randn(3, 4)
    adv, mask = torch.randn(3, 4), torch.ones(3, 4)
    plain, _ = loss_fn(old, new, adv, mask)
    doubled, _ = loss_fn(old, new, adv, mask, rollout_is_weights=torch.full((3, 4), 2.0))
    assert doubled.item() == pytest.approx(2 * plain.item(), rel=1e-5, abs=1e-7)


def test_geo_mean_takes_one_weight_per_sequence_the_geometric_mean():
    loss_fn = get_policy_loss_fn("geo_mean")
    old = new = torch.zeros(1, 2)
    adv, mask = torch.ones(1, 2), torch.ones(1, 2)
    loss, _ = loss_fn(old, new, adv, mask, rollout_is_weights=torch.tensor([[4.0, 1.0]]))
    assert loss.item() == pytest.approx(-2.0, rel=1e-5)  # -A * r * sqrt(4 * 1)


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda: parse_is_threshold("two"), "not a number"),
        (lambda: parse_is_threshold("3_1"), "lower bound above"),
        (lambda: parse_is_threshold(-1.0), "positive"),
        (lambda: parse_rs("token_k4", 2), "not one of"),
        (lambda: parse_rs("token_k1", None), "needs a threshold"),
        (lambda: parse_rs("token_k2,seq_sum_k3", "1,2,3"), "one per option"),
        (lambda: parse_rs("token_k2", "0.1_2"), "one upper bound"),
    ],
)
def test_bad_thresholds_say_what_is_wrong(call, says):
    with pytest.raises(ValueError, match=says):
        call()
