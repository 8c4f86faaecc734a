"""``ppo_loss``: the assembled PPO loss from its bound settings and the batch's named columns."""

import dataclasses
import inspect
import math

import pytest
import torch

from rlcore.algorithms import PPOLossSettings, get_policy_loss_fn, ppo_loss
from rlcore.columns import (
    ADVANTAGES,
    LOSS_MASK,
    OLD_LOG_PROBS,
    REF_LOG_PROBS,
    RETURNS,
    ROLLOUT_IS_WEIGHTS,
    VALUES,
)
from rlcore.config import load_config


def t(x: float) -> torch.Tensor:
    return torch.tensor([[x]], dtype=torch.float64)


def settings(**kwargs) -> PPOLossSettings:
    return PPOLossSettings(
        policy_loss=get_policy_loss_fn("ppo"),
        clip_ratio_low=0.2,
        clip_ratio_high=0.2,
        clip_ratio_c=None,
        loss_agg_func="token-mean",
        **kwargs,
    )


# one token: ratio 1.1 (inside the band), advantage 2, entropy 0.7
RATIO, ADV, ENTROPY = 1.1, 2.0, 0.7
ONE_TOKEN = {OLD_LOG_PROBS: t(0.0), ADVANTAGES: t(ADV), LOSS_MASK: t(1.0)}


def test_the_terms_add_up_with_the_settings_coefficients():
    log_prob, ref = math.log(RATIO), math.log(RATIO) + 0.3
    batch = {**ONE_TOKEN, REF_LOG_PROBS: t(ref), VALUES: t(1.0), RETURNS: t(3.0)}
    s = settings(
        entropy_bonus=0.01, use_kl_loss=True, kl_loss_coef=0.1, value_coef=0.5, value_clip=None
    )
    loss, metrics = ppo_loss(s, batch, t(log_prob), t(ENTROPY), values=t(1.5))
    kl = math.exp(0.3) - 0.3 - 1  # low_var_kl of ref - log_prob = 0.3
    vf = 0.5 * (1.5 - 3.0) ** 2  # unclipped squared error
    expected = -ADV * RATIO - 0.01 * ENTROPY + 0.1 * kl + 0.5 * vf
    assert loss.item() == pytest.approx(expected)
    assert metrics["kl_loss"].item() == pytest.approx(kl)
    assert metrics["vf_loss"].item() == pytest.approx(vf)
    assert metrics["entropy"].item() == pytest.approx(ENTROPY)


def test_without_use_kl_loss_the_reference_is_not_read():
    loss, metrics = ppo_loss(settings(kl_loss_coef=0.1), ONE_TOKEN, t(math.log(RATIO)), t(0.0))
    assert loss.item() == pytest.approx(-ADV * RATIO)
    assert "kl_loss" not in metrics and "vf_loss" not in metrics


def test_rollout_is_weights_weight_the_policy_term_when_the_batch_has_them():
    batch = {**ONE_TOKEN, ROLLOUT_IS_WEIGHTS: t(0.5)}
    loss, _ = ppo_loss(settings(), batch, t(math.log(RATIO)), t(0.0))
    assert loss.item() == pytest.approx(-ADV * RATIO * 0.5)


def test_global_counts_replace_the_batch_own():
    loss, _ = ppo_loss(settings(), ONE_TOKEN, t(math.log(RATIO)), t(0.0), counts={"num_tokens": 4})
    assert loss.item() == pytest.approx(-ADV * RATIO / 4)


def test_ppo_loss_takes_at_most_six_parameters():  # issue 49: settings bound once, not 23 args
    assert len(inspect.signature(ppo_loss).parameters) <= 6


@pytest.mark.parametrize("name", ["reasoning/tiny_arith_ppo", "embodied/cartpole_ppo"])
def test_settings_fields_are_the_algorithm_keys_of_the_same_name(name):
    alg = load_config(
        name, ["algorithm.policy_loss=kl_cov", "algorithm.policy_loss_options.ppo_kl_coef=0.5"]
    ).algorithm
    s = alg.ppo_loss_settings()
    for field in dataclasses.fields(s):
        if field.name not in ("policy_loss", "use_kl_loss"):
            assert getattr(s, field.name) == getattr(alg, field.name), field.name
    assert s.use_kl_loss == (alg.use_kl_loss and alg.kl_loss_coef > 0)
    assert s.policy_loss.keywords == {"kl_cov_ratio": 0.0002, "ppo_kl_coef": 0.5}
