"""Running statistics for observation normalisation and reward scaling.

Observations: ``clip((obs - mean) / sqrt(var + eps), -clip, clip)`` with the running mean and
variance of every observation the policy has seen. Rewards: divided by the running std of the
discounted return ``G = gamma * G + r`` (reset at episode ends), as in SB3's VecNormalize; the
mean is not subtracted, so the sign of a reward is kept. Both are saved in checkpoints.

The statistics are gymnasium's ``RunningMeanStd``, float64 numpy arrays: they are updated once
per env step, on a handful of numbers, where a torch op costs ~5 us of dispatch and a numpy one
~1 us (a quarter of a single-env MuJoCo step went to them in torch, measured). For a tensor env
(a GPU simulator, ``rlcore.envs.vector.tensor_device``) they are float64 tensors on the env's
device instead (``TensorRunningMeanStd``), so its observations and rewards are normalised where
they are, with the same arithmetic.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium.wrappers import utils as gymnasium_stats

EPS = 1e-8


class RunningMeanStd(gymnasium_stats.RunningMeanStd):
    """Mean and (population) variance over every row seen, merged batch by batch (Chan et al.):
    gymnasium's, in float64 numpy, kept in checkpoints as tensors. A tiny prior count keeps the
    first merge finite."""

    device: torch.device | None = None

    def __init__(self, shape: tuple[int, ...] = ()) -> None:
        super().__init__(epsilon=EPS, shape=shape, dtype=np.float64)

    def update(self, batch: np.ndarray) -> None:
        super().update(np.asarray(batch, dtype=np.float64))  # float64 batch moments too

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
        return saved.numpy().copy()


class TensorRunningMeanStd(RunningMeanStd):
    """The same statistics as float64 tensors on a tensor env's device (gymnasium's merge is
    numpy's: ``np.square`` would bring a GPU tensor to the host)."""

    def __init__(self, shape: tuple[int, ...], device: torch.device) -> None:
        self.device = device
        self.mean = torch.zeros(shape, dtype=torch.float64, device=device)
        self.var = torch.ones(shape, dtype=torch.float64, device=device)
        self.count = EPS

    def update(self, batch: torch.Tensor) -> None:
        batch = batch.to(torch.float64)
        # the population variance, as numpy's
        self.update_from_moments(batch.mean(0), batch.var(0, correction=0), batch.shape[0])

    def update_from_moments(self, mean: torch.Tensor, var: torch.Tensor, count: int) -> None:
        delta, total = mean - self.mean, self.count + count
        self.mean = self.mean + delta * count / total
        m2 = self.var * self.count + var * count + delta**2 * self.count * count / total
        self.var, self.count = m2 / total, total

    def _own(self, saved: torch.Tensor) -> torch.Tensor:
        return saved.to(self.device, torch.float64, copy=True)


def running_mean_std(shape: tuple[int, ...], device: torch.device | None) -> RunningMeanStd:
    """The statistics of observations or returns: numpy's, or a tensor env's on its device."""
    return RunningMeanStd(shape) if device is None else TensorRunningMeanStd(shape, device)


class ObsNormalizer:
    def __init__(self, shape: tuple[int, ...], clip: float, device: torch.device | None = None):
        self.stats, self.clip = running_mean_std(shape, device), clip

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


ALL = slice(None)  # every env


def replaced(whole: Any, part: slice, new: Any) -> Any:
    """``whole`` with its entries ``part`` replaced by ``new``, as a new array or tensor (never
    written in place: what was handed out before stays as it was); ``new`` itself when ``part``
    is every entry."""
    if part == ALL:
        return new
    whole = whole.clone() if isinstance(whole, torch.Tensor) else whole.copy()
    whole[part] = new
    return whole


class RewardScaler:
    def __init__(
        self, num_envs: int, gamma: float, clip: float, device: torch.device | None = None
    ) -> None:
        self.stats, self.gamma, self.clip = running_mean_std((), device), gamma, clip
        self.returns = self.stats._own(torch.zeros(num_envs, dtype=torch.float64))

    def __call__(
        self, reward: torch.Tensor, done: torch.Tensor, valid: torch.Tensor, part: slice = ALL
    ):
        """Scale one step's rewards of the envs ``part`` (all by default: ``[N]``); ``valid``
        marks real transitions (not resets)."""
        if self.stats.device is not None:  # a tensor env's: on its device
            returns = self.returns[part]
            returns = torch.where(valid, returns * self.gamma + reward, returns)
            if valid.any():
                self.stats.update(returns[valid])
            self.returns = replaced(self.returns, part, torch.where(done & valid, 0.0, returns))
            return (reward / (self.stats.var + EPS) ** 0.5).clamp(-self.clip, self.clip).float()
        reward_, done_, valid_ = reward.numpy(), done.numpy(), valid.numpy()
        returns = self.returns[part]
        returns = np.where(valid_, returns * self.gamma + reward_, returns)
        if valid_.any():
            self.stats.update(returns[valid_])
        self.returns = replaced(self.returns, part, np.where(done_ & valid_, 0.0, returns))
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
