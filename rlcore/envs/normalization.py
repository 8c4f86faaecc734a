"""Running statistics for observation normalisation and reward scaling.

Observations: ``clip((obs - mean) / sqrt(var + eps), -clip, clip)`` with the running mean and
variance of every observation the policy has seen. Rewards: divided by the running std of the
discounted return ``G = gamma * G + r`` (reset at episode ends), as in SB3's VecNormalize; the
mean is not subtracted, so the sign of a reward is kept. Both are saved in checkpoints.

The statistics are float64 numpy arrays: they are updated once per env step, on a handful of
numbers, where a torch op costs ~5 us of dispatch and a numpy one ~1 us (a quarter of a
single-env MuJoCo step went to them in torch, measured).
"""

from __future__ import annotations

import numpy as np
import torch

EPS = 1e-8


class RunningMeanStd:
    """Mean and (population) variance over every row seen, merged batch by batch (Chan et al.)."""

    def __init__(self, shape: tuple[int, ...] = ()) -> None:
        self.mean = np.zeros(shape, dtype=np.float64)
        self.var = np.ones(shape, dtype=np.float64)
        self.count = EPS  # a tiny prior count keeps the first merge finite

    def update(self, batch: np.ndarray) -> None:
        batch = np.asarray(batch, dtype=np.float64)
        b_mean, b_var, b_count = batch.mean(0), batch.var(0), batch.shape[0]
        delta, total = b_mean - self.mean, self.count + b_count
        self.mean = self.mean + delta * b_count / total
        m2 = self.var * self.count + b_var * b_count + delta**2 * self.count * b_count / total
        self.var, self.count = m2 / total, total

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {
            "mean": torch.from_numpy(np.array(self.mean, dtype=np.float64)),
            "var": torch.from_numpy(np.array(self.var, dtype=np.float64)),
            "count": torch.tensor(self.count, dtype=torch.float64),
        }

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.mean, self.var = state["mean"].numpy().copy(), state["var"].numpy().copy()
        self.count = float(state["count"])


class ObsNormalizer:
    def __init__(self, shape: tuple[int, ...], clip: float) -> None:
        self.stats, self.clip = RunningMeanStd(shape), clip

    def __call__(self, obs: torch.Tensor, update: bool) -> torch.Tensor:
        values = obs.numpy()
        if update:
            self.stats.update(values)
        scaled = (values - self.stats.mean) / np.sqrt(self.stats.var + EPS)
        return torch.from_numpy(np.clip(scaled, -self.clip, self.clip).astype(np.float32))

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.stats.state_dict()

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.stats.load_state_dict(state)


class RewardScaler:
    def __init__(self, num_envs: int, gamma: float, clip: float) -> None:
        self.stats, self.gamma, self.clip = RunningMeanStd(), gamma, clip
        self.returns = np.zeros(num_envs, dtype=np.float64)

    def __call__(self, reward: torch.Tensor, done: torch.Tensor, valid: torch.Tensor):
        """Scale one step's rewards ``[N]``; ``valid`` marks real transitions (not resets)."""
        reward_, done_, valid_ = reward.numpy(), done.numpy(), valid.numpy()
        self.returns = np.where(valid_, self.returns * self.gamma + reward_, self.returns)
        if valid_.any():
            self.stats.update(self.returns[valid_])
        self.returns = np.where(done_ & valid_, 0.0, self.returns)
        scaled = reward_ / np.sqrt(self.stats.var + EPS)
        return torch.from_numpy(np.clip(scaled, -self.clip, self.clip).astype(np.float32))

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {**self.stats.state_dict(), "returns": torch.from_numpy(self.returns.copy())}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.stats.load_state_dict(state)
        self.returns = state["returns"].numpy().copy()
