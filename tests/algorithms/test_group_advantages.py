import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rlcore.algorithms import (
    get_advantage_fn,
    masked_whiten,
    register_advantage,
)
from rlcore.algorithms.advantages import ADVANTAGES

EPS = 1e-6


def sequence_rewards(scores, length=3):
    """Rows whose only reward is on the last token, so each row's score is ``scores[i]``."""
    r = torch.zeros(len(scores), length)
    r[:, -1] = torch.tensor(scores, dtype=torch.float32)
    return r


def test_grpo_hand_case_two_groups():
    r = sequence_rewards([1.0, 0.0, 1.0, 0.0, 2.0, 4.0])
    mask = torch.ones(6, 3)
    index = ["a", "a", "a", "a", "b", "b"]
    adv, ret = get_advantage_fn("grpo")(r, mask, index=index, epsilon=EPS)
    # group a: mean 0.5, unbiased std sqrt(1/3); group b: mean 3, std sqrt(2)
    sa, sb = math.sqrt(1 / 3), math.sqrt(2)
    expected = [0.5 / (sa + EPS), -0.5 / (sa + EPS)] * 2 + [-1 / (sb + EPS), 1 / (sb + EPS)]
    assert adv[:, 0].tolist() == pytest.approx(expected, rel=1e-5)
    assert torch.equal(adv, ret)
    assert torch.equal(adv, adv[:, :1].expand(6, 3))  # broadcast over the tokens


def test_grpo_without_std_normalisation_is_centred_score():
    r = sequence_rewards([3.0, 1.0])
    adv, _ = get_advantage_fn("grpo")(r, torch.ones(2, 3), index=[0, 0], norm_adv_by_std=False)
    assert adv[:, 0].tolist() == [1.0, -1.0]


def test_grpo_group_of_one_has_mean_zero_std_one():
    adv, _ = get_advantage_fn("grpo")(sequence_rewards([5.0]), torch.ones(1, 3), index=["x"])
    assert adv[0, 0].item() == pytest.approx(5.0 / (1.0 + EPS))


def test_grpo_index_may_be_a_tensor_and_masked_tokens_are_zero():
    r = torch.tensor([[1.0, 9.0], [0.0, 9.0]])
    mask = torch.tensor([[1, 0], [1, 0]])
    adv, _ = get_advantage_fn("grpo")(r, mask, index=torch.tensor([7, 7]))
    # scores ignore the masked 9s: 1 and 0, mean 0.5, std sqrt(0.5)
    expected = 0.5 / (math.sqrt(0.5) + EPS)
    assert adv[:, 0].tolist() == pytest.approx([expected, -expected], rel=1e-5)
    assert (adv[:, 1] == 0).all()


def test_rloo_is_score_minus_mean_of_the_others():
    scores = [1.0, 0.0, 4.0]
    adv, ret = get_advantage_fn("rloo")(sequence_rewards(scores), torch.ones(3, 3), index=[1, 1, 1])
    expected = [s - (sum(scores) - s) / 2 for s in scores]
    assert adv[:, 0].tolist() == pytest.approx(expected)
    assert torch.equal(adv, ret)


def test_rloo_group_of_one_keeps_its_score():
    adv, _ = get_advantage_fn("rloo")(sequence_rewards([2.5]), torch.ones(1, 3), index=[0])
    assert adv[0].tolist() == [2.5, 2.5, 2.5]


def test_reinforce_plus_plus_discounted_return_to_go_hand_case():
    r = torch.tensor([[0.0, 0.0, 1.0], [2.0, 0.0, 0.0]])
    adv, ret = get_advantage_fn("reinforce_plus_plus")(r, torch.ones(2, 3), gamma=0.5)
    assert ret.tolist() == [[0.25, 0.5, 1.0], [2.0, 0.0, 0.0]]
    # whitened over all 6 valid tokens
    g = torch.tensor([0.25, 0.5, 1.0, 2.0, 0.0, 0.0])
    expected = (g - g.mean()) / torch.sqrt(g.var(unbiased=True) + 1e-8)
    assert adv.flatten().tolist() == pytest.approx(expected.tolist(), rel=1e-5)


def test_reinforce_plus_plus_carries_the_return_through_masked_steps():
    r = torch.tensor([[1.0, 100.0, 1.0, 0.0]])
    mask = torch.tensor([[1, 0, 1, 1]])
    _, ret = get_advantage_fn("reinforce_plus_plus")(r, mask, gamma=0.5)
    # valid steps 0, 2, 3 with rewards 1, 1, 0: G3 = 0, G2 = 1, G0 = 1 + 0.5 * 1
    assert ret.tolist() == [[1.5, 0.0, 1.0, 0.0]]


def test_reinforce_plus_plus_baseline_whitens_group_centred_scores():
    r = sequence_rewards([1.0, 3.0, 10.0, 10.0], length=2)
    mask = torch.tensor([[1, 1], [1, 1], [1, 0], [1, 1]])
    adv, ret = get_advantage_fn("reinforce_plus_plus_baseline")(r, mask, index=[0, 0, 1, 1])
    # row 2 has its reward on a masked token: scores 1, 3, 0, 10; centred -1, 1, -5, 5
    centred = torch.tensor([[-1.0, -1.0], [1.0, 1.0], [-5.0, 0.0], [5.0, 5.0]])
    assert torch.allclose(adv, masked_whiten(centred, mask.bool()))
    assert torch.equal(adv, ret)


@given(st.integers(2, 5), st.integers(1, 4), st.integers(0, 2**16))
def test_group_estimators_are_invariant_to_row_order(group, groups, seed):
    gen = torch.Generator().manual_seed(seed)
    n = group * groups
    r = torch.randn(n, 4, generator=gen, dtype=torch.float64)
    mask = torch.ones(n, 4)
    index = torch.arange(groups).repeat_interleave(group)
    perm = torch.randperm(n, generator=gen)
    for name in ("grpo", "rloo", "reinforce_plus_plus_baseline"):
        fn = get_advantage_fn(name)
        adv, _ = fn(r, mask, index=index)
        adv_perm, _ = fn(r[perm], mask, index=index[perm])
        assert torch.allclose(adv[perm], adv_perm), name


@given(st.integers(2, 6), st.integers(0, 2**16))
def test_grpo_advantages_sum_to_zero_within_each_group(group, seed):
    r = torch.randn(group, 3, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    adv, _ = get_advantage_fn("grpo")(r, torch.ones(group, 3), index=[0] * group)
    assert adv[:, 0].sum().item() == pytest.approx(0.0, abs=1e-9)


def test_index_length_must_match_the_batch():
    with pytest.raises(ValueError, match="one id per row"):
        get_advantage_fn("grpo")(torch.zeros(3, 2), torch.ones(3, 2), index=[0, 0])
    with pytest.raises(ValueError, match="need index"):
        get_advantage_fn("rloo")(torch.zeros(3, 2), torch.ones(3, 2))


def test_register_custom_estimator_and_look_it_up():
    name = "test_only_constant"

    @register_advantage(name)
    def constant(
        token_level_rewards,
        response_mask,
        *,
        values=None,
        index=None,
        gamma=1.0,
        lam=1.0,
        epsilon=1e-6,
        norm_adv_by_std=True,
    ):
        ones = torch.ones_like(token_level_rewards)
        return ones, ones

    try:
        assert get_advantage_fn(name) is constant
        assert name in ADVANTAGES.names()
    finally:
        ADVANTAGES._entries.pop(name)


def test_registering_a_taken_name_fails():
    with pytest.raises(ValueError, match="'gae' is already registered"):
        register_advantage("gae")(lambda *a, **k: None)


def test_registering_a_function_without_the_standard_kwargs_fails():
    with pytest.raises(TypeError, match="must accept the keyword arguments index"):

        @register_advantage("test_only_bad")
        def bad(token_level_rewards, response_mask, *, values=None):
            return values, values


def test_unknown_estimator_suggests_the_closest_name():
    with pytest.raises(KeyError, match="did you mean 'grpo'"):
        get_advantage_fn("gpro")
