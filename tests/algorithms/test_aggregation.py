import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rlcore.algorithms import AGG_MODES, agg_loss
from tests.algorithms.microbatching import assert_micro_batches_match_full_batch, split_batches

LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
MASK = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])  # the third sequence is empty


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", (1 + 2 + 4) / 3),
        ("seq-mean-token-sum", (3 + 4) / 2),
        ("seq-mean-token-mean", (1.5 + 4) / 2),
        ("seq-mean-token-sum-norm", (1 + 2 + 4) / (2 * 3)),
    ],
)
def test_hand_values_skip_masked_tokens_and_empty_sequences(mode, expected):
    assert agg_loss(LOSS, MASK, mode).item() == pytest.approx(expected)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_empty_batch_gives_zero_not_nan(mode):
    assert agg_loss(torch.ones(2, 3), torch.zeros(2, 3), mode).item() == 0.0


def test_unknown_mode_lists_the_known_ones():
    with pytest.raises(ValueError, match="token-mean"):
        agg_loss(LOSS, MASK, "mean")


@given(split_batches(), st.sampled_from(AGG_MODES))
def test_micro_batches_with_global_counts_sum_to_the_full_batch(batch, mode):
    b, t, seed, cuts = batch
    gen = torch.Generator().manual_seed(seed)
    loss = torch.randn(b, t, generator=gen, dtype=torch.float64, requires_grad=True)
    mask = torch.rand(b, t, generator=gen) < 0.6

    assert_micro_batches_match_full_batch(agg_loss, (loss,), 0, mask, cuts, mode)
