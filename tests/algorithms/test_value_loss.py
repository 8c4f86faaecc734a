import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rlcore.algorithms import AGG_MODES, value_loss
from tests.algorithms.microbatching import assert_micro_batches_match_full_batch, split_batches


def one_value(v, ret, old, **kwargs):
    v = torch.tensor([[v]], dtype=torch.float64, requires_grad=True)
    loss, metrics = value_loss(
        v,
        torch.tensor([[ret]], dtype=torch.float64),
        torch.tensor([[old]], dtype=torch.float64),
        torch.ones(1, 1),
        **kwargs,
    )
    (grad,) = torch.autograd.grad(loss, v)
    return loss.item(), {k: m.item() for k, m in metrics.items()}, grad.item()


def test_unclipped_squared_error_is_half_mse():
    v = torch.tensor([[1.0, 2.0, 3.0]])
    ret = torch.tensor([[0.0, 2.0, 5.0]])
    loss, metrics = value_loss(v, ret, torch.zeros(1, 3), torch.ones(1, 3))
    assert loss.item() == pytest.approx(0.5 * (1 + 0 + 4) / 3)
    assert metrics["vf_clipfrac"].item() == 0.0
    assert metrics["vpred_mean"].item() == pytest.approx(2.0)


def test_inside_the_band_the_clipped_prediction_is_the_prediction_itself():
    loss, metrics, grad = one_value(0.15, 1.0, 0.0, value_clip=0.2)
    assert loss == 0.5 * (0.15 - 1.0) ** 2  # exact: v_c == v, so max() returns the same number
    assert grad == pytest.approx(0.15 - 1.0)
    assert metrics["vf_clipfrac"] == 0.0


def test_outside_the_band_the_pessimistic_term_wins():
    # v = 1 moved far from old = 0; R = 1. Unclipped error 0, clipped (0.2 - 1)^2 = 0.64.
    loss, metrics, grad = one_value(1.0, 1.0, 0.0, value_clip=0.2)
    assert loss == pytest.approx(0.5 * 0.64)
    assert grad == 0.0  # the clamped term does not depend on v
    assert metrics["vf_clipfrac"] == 1.0  # RLinf's post-clamp measure would report 0 here


def test_clip_fraction_counts_only_tokens_where_the_clipped_term_was_taken():
    # v = -1 with old = 0, R = 2: the prediction is outside the band, but the unclipped error 9
    # beats the clipped (-0.2 - 2)^2 = 4.84, so the gradient flows: not counted (as in verl).
    loss, metrics, grad = one_value(-1.0, 2.0, 0.0, value_clip=0.2)
    assert loss == pytest.approx(0.5 * 9)
    assert grad == pytest.approx(-1.0 - 2.0)
    assert metrics["vf_clipfrac"] == 0.0


def test_clip_fraction_is_the_share_of_valid_tokens_whose_gradient_the_clip_cut():
    # old 0, clip 0.2, R = 1 everywhere: v = 1 (clipped term 0.64 > 0: taken), v = 0.1 (inside),
    # v = -1 (unclipped 4 > clipped 1.44: not taken), and a masked token that would be taken.
    v = torch.tensor([[1.0, 0.1, -1.0, 1.0]])
    _, metrics = value_loss(
        v, torch.ones(1, 4), torch.zeros(1, 4), torch.tensor([[1, 1, 1, 0]]), value_clip=0.2
    )
    assert metrics["vf_clipfrac"].item() == pytest.approx(1 / 3)


@pytest.mark.parametrize(
    ("v", "ret", "expected"),
    [
        (0.0, 0.5, 0.5 * 0.25),  # |x| <= delta: 0.5 x^2
        (0.0, 2.0, 1.0 * (2.0 - 0.5)),  # |x| > delta: delta (|x| - delta / 2)
        (3.0, 0.0, 1.0 * (3.0 - 0.5)),
    ],
)
def test_huber_hand_values(v, ret, expected):
    loss, _, _ = one_value(v, ret, v, huber_delta=1.0)
    assert loss == pytest.approx(expected)


def test_clipped_huber_takes_the_larger_of_the_two():
    # old = 0, clip 0.5, v = 2, R = 2: huber(0) = 0 vs huber(2 - 0.5 = 1.5) = 1.5 - 0.5 = 1.0
    loss, metrics, _ = one_value(2.0, 2.0, 0.0, value_clip=0.5, huber_delta=1.0)
    assert loss == pytest.approx(1.0)
    assert metrics["vf_clipfrac"] == 1.0


def test_masked_tokens_do_not_count():
    v = torch.tensor([[1.0, 100.0]])
    loss, metrics = value_loss(v, torch.zeros(1, 2), torch.zeros(1, 2), torch.tensor([[1, 0]]))
    assert loss.item() == pytest.approx(0.5)
    assert metrics["vpred_mean"].item() == 1.0


@given(split_batches(), st.sampled_from(AGG_MODES), st.sampled_from([None, 1.0]))
def test_micro_batched_value_loss_equals_the_full_batch(batch, mode, delta):
    b, t, seed, cuts = batch
    gen = torch.Generator().manual_seed(seed)
    old = torch.randn(b, t, generator=gen, dtype=torch.float64)
    v = (old + torch.randn(b, t, generator=gen, dtype=torch.float64) * 0.5).requires_grad_()
    ret = torch.randn(b, t, generator=gen, dtype=torch.float64) * 2
    mask = torch.rand(b, t, generator=gen) < 0.7

    def loss_fn(vp, r, o, m, agg, **counts):
        return value_loss(
            vp, r, o, m, value_clip=0.2, huber_delta=delta, loss_agg_mode=agg, **counts
        )[0]

    assert_micro_batches_match_full_batch(loss_fn, (v, ret, old), 0, mask, cuts, mode)
