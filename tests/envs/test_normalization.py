import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rlcore.envs.normalization import RewardScaler, RunningMeanStd, TensorRunningMeanStd


@given(st.lists(st.integers(1, 20), min_size=1, max_size=6), st.integers(0, 2**16))
def test_running_moments_equal_the_moments_of_everything_seen(sizes, seed):
    rng = np.random.default_rng(seed)
    batches = [rng.standard_normal((n, 3)) * 4 + 2 for n in sizes]
    stats = RunningMeanStd((3,))
    for batch in batches:
        stats.update(batch)
    everything = np.concatenate(batches)
    np.testing.assert_allclose(stats.mean, everything.mean(0), atol=1e-6)
    np.testing.assert_allclose(stats.var, everything.var(0), atol=1e-6)  # population variance


@given(st.lists(st.integers(1, 20), min_size=1, max_size=6), st.integers(0, 2**16))
def test_a_tensor_envs_statistics_merge_as_gymnasiums_do(sizes, seed):
    rng = np.random.default_rng(seed)
    numpy_stats, tensor_stats = RunningMeanStd((2,)), TensorRunningMeanStd((2,), "cpu")
    for n in sizes:
        batch = rng.standard_normal((n, 2)) * 3 - 1
        numpy_stats.update(batch)
        tensor_stats.update(torch.from_numpy(batch))
    np.testing.assert_allclose(tensor_stats.mean.numpy(), numpy_stats.mean, rtol=1e-12)
    np.testing.assert_allclose(tensor_stats.var.numpy(), numpy_stats.var, rtol=1e-12)
    assert tensor_stats.count == numpy_stats.count


def test_reward_scaler_divides_by_the_std_of_discounted_returns_hand_case():
    """Each step's rewards over the std of the returns of the steps before it."""
    scaler = RewardScaler(num_envs=1, gamma=0.5, clip=10.0)
    valid, not_done = torch.tensor([True]), torch.tensor([False])
    first = scaler(torch.tensor([2.0]), not_done, valid)  # no return seen: the prior, var 1
    assert first.item() == pytest.approx(2.0, rel=1e-6)
    second = scaler(torch.tensor([2.0]), not_done, valid)  # returns seen: 2 -> variance ~0
    assert second.item() == 10.0  # 2 / ~0, clipped
    third = scaler(torch.tensor([2.0]), not_done, valid)  # G: 2, then 0.5 * 2 + 2 = 3
    # returns seen: 2, 3 -> population variance 0.25 -> std 0.5
    assert third.item() == pytest.approx(2.0 / 0.5, rel=1e-6)


@pytest.mark.parametrize("device", [None, "cpu"])  # numpy statistics, a tensor env's
def test_rewards_scaled_a_part_at_a_time_equal_the_whole_vectors(device):
    """Pipeline stages step the envs a part at a time: each part's rewards scaled as the whole
    vector's are, and the statistics after the step the same, bit for bit."""
    gen = torch.Generator().manual_seed(0)
    whole, staged = (RewardScaler(6, 0.9, 10.0, device) for _ in range(2))
    parts = [slice(0, 2), slice(2, 4), slice(4, 6)]
    for _ in range(20):
        reward = torch.randn(6, generator=gen, dtype=torch.float64).float() * 5
        done, valid = torch.rand(6, generator=gen) < 0.2, torch.rand(6, generator=gen) < 0.9
        want = whole(reward, done, valid)
        got = torch.cat([staged(reward[p], done[p], valid[p], p) for p in parts])
        assert torch.equal(got, want)
        assert float(staged.stats.var) == float(whole.stats.var)
        assert staged.stats.count == whole.stats.count


def test_reward_scaler_ignores_reset_steps_and_restarts_returns_at_episode_ends():
    scaler = RewardScaler(num_envs=1, gamma=1.0, clip=100.0)
    scaler(torch.tensor([1.0]), torch.tensor([True]), torch.tensor([True]))  # episode ends
    assert scaler.returns[0] == 0.0
    scaler(torch.tensor([0.0]), torch.tensor([False]), torch.tensor([False]))  # reset step
    assert scaler.stats.count < 1.5  # only the one real transition was counted
