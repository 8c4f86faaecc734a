"""GDPO (verl's ``gdpo``): each reward component normalised within its group apart, summed with
its weight, then whitened over the batch's valid tokens; against hand-worked values and against
GRPO, which it reduces to for one component."""

import math

import pytest
import torch

from rlcore.algorithms import compute_advantages, get_advantage_fn

GDPO = get_advantage_fn("gdpo")


def run(components, weights, mask, index, **kw):
    rewards = torch.zeros(mask.shape)  # gdpo reads the components, not these
    return GDPO(
        rewards,
        mask,
        index=index,
        reward_components=torch.tensor(components),
        reward_component_weights=torch.tensor(weights),
        **kw,
    )[0]


def test_each_component_is_normalised_in_its_group_then_weighted_and_whitened():
    # one group of 3, two tokens each; component 1 = [1, 0, 0], component 2 = [1, 1, 0]
    # group-normalised (unbiased std 1/sqrt 3): c1 -> [2, -1, -1]/sqrt3, c2 -> [1, 1, -2]/sqrt3
    # weights (1, 0.5): [2.5, -0.5, -2]/sqrt3, mean 0; over 6 tokens the unbiased variance is
    # 2 * (6.25 + 0.25 + 4) / 3 / 5 = 1.4, so the advantages are [2.5, -0.5, -2] / sqrt(4.2)
    mask = torch.ones(3, 2)
    got = run([[1.0, 1.0], [0.0, 1.0], [0.0, 0.0]], [1.0, 0.5], mask, [7, 7, 7])
    want = torch.tensor([2.5, -0.5, -2.0]) / math.sqrt(4.2)
    assert torch.allclose(got, want[:, None].expand(3, 2), atol=1e-5)


def test_groups_are_normalised_apart_and_masked_tokens_stay_zero():
    # two groups of 2 with different spreads: each normalises to +-1/sqrt2 * sqrt2 = +-0.7071..
    # per component (unbiased std of two values a, b is |a - b| / sqrt 2)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1]], dtype=torch.float32)
    comps = [[10.0], [0.0], [0.2], [0.1]]
    got = run(comps, [1.0], mask, ["a", "a", "b", "b"], epsilon=0.0)
    per_row = torch.tensor([1.0, -1.0, 1.0, -1.0]) / math.sqrt(2)
    tokens = per_row[:, None] * mask
    valid = mask.bool()
    mean, var = tokens[valid].mean(), tokens[valid].var()
    want = torch.where(valid, (tokens - mean) / torch.sqrt(var + 1e-8), torch.zeros(()))
    assert torch.allclose(got, want, atol=1e-5)
    assert (got[~valid] == 0).all()


def test_one_component_is_grpo_on_it_then_whitened():
    torch.manual_seed(0)
    scores = torch.randint(0, 3, (12,)).float()
    mask = (torch.rand(12, 5) < 0.8).float()
    mask[:, 0] = 1
    index = torch.arange(12) // 4
    rewards = torch.zeros(12, 5)
    rewards[:, 0] = scores
    grpo, _ = compute_advantages("grpo", rewards, mask, normalize=True, index=index)
    for weight in (1.0, 3.0):  # a positive weight is a scale, which whitening removes
        got = run(scores[:, None].tolist(), [weight], mask, index)
        assert torch.allclose(got, grpo, atol=1e-5)
    # a zero weight removes a component
    noise = torch.rand(12).tolist()
    got = run(
        [[s, n] for s, n in zip(scores.tolist(), noise, strict=True)], [1.0, 0.0], mask, index
    )
    assert torch.allclose(got, grpo, atol=1e-5)


def test_gdpo_keeps_apart_responses_that_grpo_on_the_sum_gives_one_advantage():
    # GDPO's motivating case (arXiv 2601.05242): two binary rewards, groups of 2. Group A is
    # (1, 0) vs (0, 0), group B is (1, 1) vs (0, 0). GRPO on the summed reward gives the better
    # answer of each group the same advantage (+1/sqrt2 over std); GDPO gives the one that is
    # better in two components more (in B both components count, in A only one).
    mask = torch.ones(4, 1)
    comps = [[1.0, 0.0], [0.0, 0.0], [1.0, 1.0], [0.0, 0.0]]
    index = [0, 0, 1, 1]
    gdpo = run(comps, [1.0, 1.0], mask, index)[:, 0]
    sums = torch.tensor([[sum(c)] for c in comps])
    grpo, _ = compute_advantages("grpo", sums, mask, normalize=True, index=index)
    assert float(grpo[0, 0]) == pytest.approx(float(grpo[2, 0]), abs=1e-6)
    assert gdpo[2] > gdpo[0] > 0


def test_without_components_the_one_reward_is_the_summed_token_rewards_as_verl_falls_back():
    # verl's compute_gdpo_outcome_advantage with no per-key scores: GRPO on the summed token
    # rewards, weight 1, whitened. One group of 2 scoring 1 and 0: (1 - 0.5) / (1/sqrt2) =
    # +-1/sqrt2 on each of 2 tokens; over 4 tokens [a, a, -a, -a] (unbiased variance 4a^2/3)
    # whitening gives +-sqrt(3)/2, whatever a
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    got, returns = GDPO(rewards, torch.ones(2, 2), index=[0, 0])
    want = math.sqrt(3) / 2 * torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
    assert torch.allclose(got, want, atol=1e-5) and torch.equal(got, returns)
    with pytest.raises(ValueError, match="2 reward components but weights of shape"):
        run([[1.0, 0.0], [0.0, 1.0]], [1.0], torch.ones(2, 1), [0, 0])
    with pytest.raises(ValueError, match=r"need reward_component_weights \[K\]"):
        GDPO(rewards, torch.ones(2, 2), index=[0, 0], reward_components=torch.ones(2, 1))
