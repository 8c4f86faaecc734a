import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rlcore.algorithms import (
    AdaptiveKLController,
    FixedKLController,
    build_kl_controller,
    kl_penalty,
)

LOGP, REF = math.log(0.5), math.log(0.25)
D = LOGP - REF  # ln 2


@pytest.mark.parametrize(
    ("kinds", "expected"),
    [
        (("kl", "k1"), D),
        (("abs",), abs(D)),
        (("mse", "k2"), 0.5 * D * D),
        # k3 with k = ref - logp = -ln 2: exp(k) - k - 1 = 0.5 + ln 2 - 1
        (("low_var_kl", "k3"), 0.5 + math.log(2) - 1),
    ],
)
def test_sampled_token_estimators_hand_values(kinds, expected):
    for kind in kinds:
        value = kl_penalty(torch.tensor([[LOGP]]), torch.tensor([[REF]]), kind)
        assert value.item() == pytest.approx(expected), kind


def test_abs_is_symmetric_and_k1_is_signed():
    a, b = torch.tensor([[REF]]), torch.tensor([[LOGP]])
    assert kl_penalty(a, b, "k1").item() == pytest.approx(-D)
    assert kl_penalty(a, b, "abs").item() == pytest.approx(D)


def test_k3_is_clamped_for_extreme_log_ratios():
    value = kl_penalty(torch.tensor([[-100.0]]), torch.tensor([[0.0]]), "low_var_kl")
    assert value.item() == 10.0


def test_full_kl_hand_case():
    p = torch.tensor([0.5, 0.25, 0.25])
    q = torch.tensor([0.25, 0.25, 0.5])
    expected = 0.5 * math.log(2) + 0.0 + 0.25 * math.log(0.5)
    value = kl_penalty(p.log().view(1, 1, 3), q.log().view(1, 1, 3), "full")
    assert value.shape == (1, 1)
    assert value.item() == pytest.approx(expected)


@given(st.integers(2, 30), st.integers(0, 2**16))
def test_full_kl_is_the_expectation_of_k1_under_the_policy(vocab, seed):
    gen = torch.Generator().manual_seed(seed)
    logp = torch.log_softmax(torch.randn(2, 3, vocab, generator=gen, dtype=torch.float64), -1)
    logq = torch.log_softmax(torch.randn(2, 3, vocab, generator=gen, dtype=torch.float64), -1)
    full = kl_penalty(logp, logq, "full")
    expectation = (logp.exp() * kl_penalty(logp, logq, "k1")).sum(-1)
    assert torch.allclose(full, expectation)
    assert (full >= -1e-12).all()
    assert torch.allclose(kl_penalty(logp, logp, "full"), torch.zeros(2, 3, dtype=torch.float64))


def test_full_kl_needs_vocabulary_vectors():
    with pytest.raises(ValueError, match=r"\[B, T, V\]"):
        kl_penalty(torch.zeros(2, 3), torch.zeros(2, 3), "full")


def test_unknown_kind_suggests_a_known_one():
    with pytest.raises(ValueError, match="did you mean 'low_var_kl'"):
        kl_penalty(torch.zeros(1, 1), torch.zeros(1, 1), "low_var_k")


def test_fixed_controller_never_moves():
    ctrl = FixedKLController(0.05)
    ctrl.update(current_kl=10.0, n_steps=1000)
    assert ctrl.value == 0.05


@pytest.mark.parametrize(
    ("current_kl", "expected"),
    [
        (0.1, 0.1 * (1 + 0.2 * 10 / 100)),  # error 1.0 clipped to 0.2
        (0.04, 0.1 * (1 - 0.2 * 10 / 100)),  # error -0.2
        (0.055, 0.1 * (1 + 0.1 * 10 / 100)),  # error 0.1, inside the clip
    ],
)
def test_adaptive_controller_proportional_update(current_kl, expected):
    ctrl = AdaptiveKLController(init_kl_coef=0.1, target_kl=0.05, horizon=100)
    ctrl.update(current_kl, n_steps=10)
    assert ctrl.value == pytest.approx(expected)


def test_adaptive_controller_state_round_trips():
    ctrl = build_kl_controller("adaptive", kl_coef=0.2, target_kl=0.01, horizon=50)
    ctrl.update(0.5, n_steps=5)
    restored = build_kl_controller("adaptive", kl_coef=0.2, target_kl=0.01, horizon=50)
    restored.load_state_dict(ctrl.state_dict())
    assert restored.value == ctrl.value != 0.2


def test_adaptive_controller_rejects_nonfinite_kl():
    with pytest.raises(ValueError, match="non-finite"):
        AdaptiveKLController(0.1, 0.05, 100).update(float("nan"), 1)
