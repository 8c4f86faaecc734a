"""Running statistics for observation normalisation and reward scaling.

Observations: ``clip((obs - mean) / sqrt(var + eps), -clip, clip)`` with the running mean and
variance of every observation the policy has seen. Rewards: divided by the running std of the
discounted return ``G = gamma * G + r`` (reset at episode ends), as in SB3's VecNormalize; the
mean is not subtracted, so the sign of a reward is kept. Both are saved in checkpoints.
"""

from __future__ import annotations

import torch

EPS = 1e-8


class RunningMeanStd:
    """Mean and (population) variance over every row seen, merged batch by batch (Chan et al.)."""

    def __init__(self, shape: tuple[int, ...] = ()) -> None:
        self.mean = torch.zeros(shape, dtype=torch.float64)
        self.var = torch.ones(shape, dtype=torch.float64)
        self.count = EPS  # a tiny prior count keeps the first merge finite

    def update(self, batch: torch.Tensor) -> None:
        batch = batch.to(torch.float64)
        b_mean, b_var, b_count = batch.mean(0), batch.var(0, unbiased=False), batch.shape[0]
        delta, total = b_mean - self.mean, self.count + b_count
        self.mean = self.mean + delta * b_count / total
        m2 = self.var * self.count + b_var * b_count + delta**2 * self.count * b_count / total
        self.var, self.count = m2 / total, total

    def state_dict(self) -> dict:
        return {"mean": self.mean, "var": self.var, "count": self.count}

    def load_state_dict(self, state: dict) -> None:
        self.mean, self.var, self.count = state["mean"], state["var"], state["count"]


class ObsNormalizer:
    def __init__(self, shape: tuple[int, ...], clip: float) -> None:
        self.stats, self.clip = RunningMeanStd(shape), clip

    def __call__(self, obs: torch.Tensor, update: bool) -> torch.Tensor:
        if update:
            self.stats.update(obs)
        scaled = (obs - self.stats.mean) / torch.sqrt(self.stats.var + EPS)
        return torch.clamp(scaled, -self.clip, self.clip).to(obs.dtype)


class RewardScaler:
    def __init__(self, num_envs: int, gamma: float, clip: float) -> None:
        self.stats, self.gamma, self.clip = RunningMeanStd(), gamma, clip
        self.returns = torch.zeros(num_envs, dtype=torch.float64)

    def __call__(self, reward: torch.Tensor, done: torch.Tensor, valid: torch.Tensor):
        """Scale one step's rewards ``[N]``; ``valid`` marks real transitions (not resets)."""
        self.returns = torch.where(valid, self.returns * self.gamma + reward, self.returns)
        if valid.any():
            self.stats.update(self.returns[valid])
        self.returns = torch.where(done & valid, torch.zeros_like(self.returns), self.returns)
        scaled = reward / torch.sqrt(self.stats.var + EPS)
        return torch.clamp(scaled, -self.clip, self.clip).to(reward.dtype)

    def state_dict(self) -> dict:
        return {"stats": self.stats.state_dict(), "returns": self.returns}

    def load_state_dict(self, state: dict) -> None:
        self.stats.load_state_dict(state["stats"])
        self.returns = state["returns"]
