import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rlcore.algorithms import entropy_from_logits, masked_mean, masked_var, masked_whiten


def test_masked_mean_averages_valid_positions_only():
    x = torch.tensor([[1.0, 3.0, 100.0], [5.0, -7.0, 9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert masked_mean(x, mask).item() == pytest.approx((1 + 3 + 5) / 3)
    assert masked_mean(x, mask, dim=-1).tolist() == pytest.approx([2.0, 5.0])


def test_masked_mean_ignores_nan_and_inf_padding():
    x = torch.tensor([[2.0, float("nan"), float("inf")]])
    assert masked_mean(x, torch.tensor([[1, 0, 0]])).item() == 2.0


def test_masked_mean_of_empty_mask_is_zero_not_nan():
    assert masked_mean(torch.ones(2, 3), torch.zeros(2, 3)).item() == 0.0


def test_masked_var_is_bessel_corrected():
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0, 99.0]])
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    # mean 2.5, squared deviations 2.25 + 0.25 + 0.25 + 2.25 = 5 -> 5 / 3 unbiased, 5 / 4 biased
    assert masked_var(x, mask).item() == pytest.approx(5 / 3)
    assert masked_var(x, mask, unbiased=False).item() == pytest.approx(5 / 4)


@pytest.mark.parametrize("valid", [0, 1])
def test_masked_var_refuses_too_few_valid_positions(valid):
    mask = torch.zeros(1, 4)
    mask[0, :valid] = 1
    with pytest.raises(ValueError, match="at least 2 valid positions"):
        masked_var(torch.randn(1, 4), mask)


def test_masked_whiten_hand_case():
    x = torch.tensor([[1.0, 3.0, 0.0]])
    mask = torch.tensor([[1, 1, 0]])
    # mean 2, unbiased var 2 -> (x - 2) / sqrt(2 + 1e-8)
    expected = [-1 / math.sqrt(2 + 1e-8), 1 / math.sqrt(2 + 1e-8), 0.0]
    assert masked_whiten(x, mask)[0].tolist() == pytest.approx(expected)
    assert masked_whiten(x, mask, shift_mean=False)[0].tolist() == pytest.approx(
        [2 - 1 / math.sqrt(2), 2 + 1 / math.sqrt(2), 0.0]
    )


rows = st.integers(1, 4)
cols = st.integers(2, 6)


@given(rows, cols, st.integers(0, 2**16), st.floats(0.1, 100.0))
def test_masked_whiten_gives_zero_mean_unit_variance_on_valid_positions(b, t, seed, scale):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(b, t, generator=gen, dtype=torch.float64) * scale + 3.0
    mask = torch.rand(b, t, generator=gen) < 0.7
    mask[0, :2] = True
    out = masked_whiten(x, mask)
    valid = out[mask]
    assert valid.mean().item() == pytest.approx(0.0, abs=1e-9)
    assert valid.var(unbiased=True).item() == pytest.approx(1.0, rel=1e-6)
    assert (out[~mask] == 0).all()


@given(rows, cols, st.integers(0, 2**16))
def test_masked_whiten_is_blind_to_padding_values(b, t, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(b, t, generator=gen)
    mask = torch.rand(b, t, generator=gen) < 0.6
    mask[0, :2] = True
    garbage = x.clone()
    garbage[~mask] = torch.tensor([float("nan"), 1e30, -float("inf")]).repeat(b * t)[
        : int((~mask).sum())
    ]
    assert torch.equal(masked_whiten(x, mask), masked_whiten(garbage, mask))


def test_entropy_hand_cases():
    # p = (1/4, 3/4): H = -(1/4 ln 1/4 + 3/4 ln 3/4)
    logits = torch.tensor([0.0, math.log(3.0)])
    expected = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert entropy_from_logits(logits).item() == pytest.approx(expected)
    assert entropy_from_logits(torch.zeros(2, 3, 7)).flatten().tolist() == pytest.approx(
        [math.log(7)] * 6
    )


def test_entropy_is_finite_for_large_and_masked_logits():
    logits = torch.tensor([[1e4, 0.0, -float("inf")], [-float("inf"), 0.0, 0.0]])
    assert entropy_from_logits(logits).tolist() == pytest.approx([0.0, math.log(2)])


@given(st.integers(2, 50), st.integers(0, 2**16))
def test_entropy_matches_the_categorical_definition(vocab, seed):
    logits = torch.randn(3, vocab, generator=torch.Generator().manual_seed(seed)) * 5
    p = torch.softmax(logits.double(), -1)
    expected = -(p * p.log()).sum(-1)
    assert torch.allclose(entropy_from_logits(logits.double()), expected, atol=1e-10)
