"""Running statistics for observation normalisation and reward scaling.

Observations: ``clip((obs - mean) / sqrt(var + eps), -clip, clip)`` with the running mean and
variance of every observation the policy has seen. Rewards: divided by the running std of the
discounted return ``G = gamma * G + r`` (reset at episode ends), as in SB3's VecNormalize; the
mean is not subtracted, so the sign of a reward is kept. Both are saved in checkpoints.

The statistics are float64 numpy arrays: they are updated once per env step, on a handful of
numbers, where a torch op costs ~5 us of dispatch and a numpy one ~1 us (a quarter of a
single-env MuJoCo step went to them in torch, measured). For a tensor env (a GPU simulator,
``rlcore.envs.vector.tensor_device``) they are float64 tensors on the env's device instead
(``device=``), so its observations and rewards are normalised where they are, with the same
arithmetic.
"""

from __future__ import annotations

import numpy as np
import torch

EPS = 1e-8


class RunningMeanStd:
    """Mean and (population) variance over every row seen, merged batch by batch (Chan et al.)."""

    def __init__(self, shape: tuple[int, ...] = (), device: torch.device | None = None) -> None:
        self.device = device
        if device is None:
            self.mean = np.zeros(shape, dtype=np.float64)
            self.var = np.ones(shape, dtype=np.float64)
        else:
            self.mean = torch.zeros(shape, dtype=torch.float64, device=device)
            self.var = torch.ones(shape, dtype=torch.float64, device=device)
        self.count = EPS  # a tiny prior count keeps the first merge finite

    def update(self, batch: np.ndarray | torch.Tensor) -> None:
        if self.device is None:
            batch = np.asarray(batch, dtype=np.float64)
            b_var = batch.var(0)
        else:
            batch = batch.to(torch.float64)
            b_var = batch.var(0, correction=0)  # the population variance, as numpy's
        b_mean, b_count = batch.mean(0), batch.shape[0]
        delta, total = b_mean - self.mean, self.count + b_count
        self.mean = self.mean + delta * b_count / total
        m2 = self.var * self.count + b_var * b_count + delta**2 * self.count * b_count / total
        self.var, self.count = m2 / total, total

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {
            "mean": _cpu(self.mean),
            "var": _cpu(self.var),
            "count": torch.tensor(self.count, dtype=torch.float64),
        }

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.mean, self.var = self._own(state["mean"]), self._own(state["var"])
        self.count = float(state["count"])

    def _own(self, saved: torch.Tensor) -> np.ndarray | torch.Tensor:
        if self.device is None:
            return saved.numpy().copy()
        return saved.to(self.device, torch.float64, copy=True)


class ObsNormalizer:
    def __init__(self, shape: tuple[int, ...], clip: float, device: torch.device | None = None):
        self.stats, self.clip = RunningMeanStd(shape, device), clip

    def __call__(self, obs: torch.Tensor, update: bool) -> torch.Tensor:
        values = obs.numpy() if self.stats.device is None else obs.to(torch.float64)
        if update:
            self.stats.update(values)
        scaled = (values - self.stats.mean) / (self.stats.var + EPS) ** 0.5
        if self.stats.device is not None:
            return scaled.clamp(-self.clip, self.clip).float()
        return torch.from_numpy(np.clip(scaled, -self.clip, self.clip).astype(np.float32))

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.stats.state_dict()

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.stats.load_state_dict(state)


class RewardScaler:
    def __init__(
        self, num_envs: int, gamma: float, clip: float, device: torch.device | None = None
    ) -> None:
        self.stats, self.gamma, self.clip = RunningMeanStd((), device), gamma, clip
        self.returns = self.stats._own(torch.zeros(num_envs, dtype=torch.float64))

    def __call__(self, reward: torch.Tensor, done: torch.Tensor, valid: torch.Tensor):
        """Scale one step's rewards ``[N]``; ``valid`` marks real transitions (not resets)."""
        if self.stats.device is not None:  # a tensor env's: on its device
            self.returns = torch.where(valid, self.returns * self.gamma + reward, self.returns)
            if valid.any():
                self.stats.update(self.returns[valid])
            self.returns = torch.where(done & valid, 0.0, self.returns)
            return (reward / (self.stats.var + EPS) ** 0.5).clamp(-self.clip, self.clip).float()
        reward_, done_, valid_ = reward.numpy(), done.numpy(), valid.numpy()
        self.returns = np.where(valid_, self.returns * self.gamma + reward_, self.returns)
        if valid_.any():
            self.stats.update(self.returns[valid_])
        self.returns = np.where(done_ & valid_, 0.0, self.returns)
        scaled = reward_ / np.sqrt(self.stats.var + EPS)
        return torch.from_numpy(np.clip(scaled, -self.clip, self.clip).astype(np.float32))

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {**self.stats.state_dict(), "returns": _cpu(self.returns)}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.stats.load_state_dict(state)
        self.returns = self.stats._own(state["returns"])


def _cpu(values: np.ndarray | torch.Tensor) -> torch.Tensor:
    """A float64 CPU tensor of its own (checkpoints hold these whatever the device)."""
    if isinstance(values, torch.Tensor):
        return values.detach().to("cpu", torch.float64, copy=True)
    return torch.from_numpy(np.array(values, dtype=np.float64))
