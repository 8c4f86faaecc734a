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
    scaler = RewardScaler(num_envs=1, gamma=0.5, clip=10.0)
    valid, not_done = torch.tensor([True]), torch.tensor([False])
    first = scaler(torch.tensor([2.0]), not_done, valid)  # G = 2: one sample, variance ~0
    assert first.item() == 10.0  # 2 / ~0, clipped
    second = scaler(torch.tensor([2.0]), not_done, valid)  # G = 0.5 * 2 + 2 = 3
    # returns seen: 2, 3 -> population variance 0.25 -> std 0.5
    assert second.item() == pytest.approx(2.0 / 0.5, rel=1e-6)


def test_reward_scaler_ignores_reset_steps_and_restarts_returns_at_episode_ends():
    scaler = RewardScaler(num_envs=1, gamma=1.0, clip=100.0)
    scaler(torch.tensor([1.0]), torch.tensor([True]), torch.tensor([True]))  # episode ends
    assert scaler.returns[0] == 0.0
    scaler(torch.tensor([0.0]), torch.tensor([False]), torch.tensor([False]))  # reset step
    assert scaler.stats.count < 1.5  # only the one real transition was counted
