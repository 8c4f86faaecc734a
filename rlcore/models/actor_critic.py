"""Actor-critic: a trunk (shared, or one per head), a policy head and a value head. The trunk is
an MLP for vector observations and the Nature-DQN CNN for (H, W, C) images.

Policy heads: Categorical (Discrete), one Categorical per dimension (MultiDiscrete), and a
Gaussian with a state-independent log-std (1-D Box). Gaussian actions are sampled unbounded and
clipped to the space's bounds only when sent to the env, so log-probs stay those of the sample.
"""

from __future__ import annotations

import itertools
import math
from typing import Literal

import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical, Normal

from envs.vector import SpaceSpec

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


def _mlp(sizes: list[int], activation: str) -> nn.Sequential:
    layers: list[nn.Module] = []
    for fan_in, fan_out in itertools.pairwise(sizes):
        layers += [nn.Linear(fan_in, fan_out), ACTIVATIONS[activation]()]
    return nn.Sequential(*layers)


class ImageEncoder(nn.Module):
    """The Nature-DQN convolutions (Mnih et al. 2015) on (H, W, C) images, then a dense layer."""

    def __init__(self, shape: tuple[int, int, int], scale: float, width: int) -> None:
        super().__init__()
        height, wide, channels = shape
        self.scale = scale
        self.convs = nn.Sequential(
            nn.Conv2d(channels, 32, 8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(), nn.Flatten(),
        )  # fmt: skip
        if min(height, wide) < 36:
            raise ValueError(f"the CNN policy needs images of at least 36x36, got {height}x{wide}")
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, channels, height, wide)).shape[1]
        self.dense = nn.Sequential(nn.Linear(flat, width), nn.ReLU())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        images = obs.movedim(-1, -3) * self.scale  # (..., H, W, C) -> (..., C, H, W)
        return self.dense(self.convs(images))


def _encoder(spec: SpaceSpec, hidden_sizes: list[int], activation: str) -> nn.Module:
    if len(spec.obs_shape) == 3:
        return ImageEncoder(spec.obs_shape, spec.obs_scale, hidden_sizes[-1])
    return _mlp([spec.obs_shape[0], *hidden_sizes], activation)


def _orthogonal(module: nn.Module, gain: float) -> None:
    for layer in module.modules():
        if isinstance(layer, (nn.Linear, nn.Conv2d)):
            nn.init.orthogonal_(layer.weight, gain)
            nn.init.zeros_(layer.bias)


class ActorCritic(nn.Module):
    """``act`` samples (or picks the mode) for the env; ``evaluate`` scores stored actions."""

    def __init__(
        self,
        spec: SpaceSpec,
        hidden_sizes: list[int],
        activation: Literal["tanh", "relu"] = "tanh",
        shared_backbone: bool = True,
        ortho_init: bool = True,
        log_std_init: float = 0.0,
    ) -> None:
        super().__init__()
        self.spec = spec
        self.policy_trunk = _encoder(spec, hidden_sizes, activation)
        self.value_trunk = (
            self.policy_trunk if shared_backbone else _encoder(spec, hidden_sizes, activation)
        )
        width = hidden_sizes[-1]
        n_out = sum(spec.action_dims) if spec.action_kind != "box" else spec.action_dims[0]
        self.policy_head = nn.Linear(width, n_out)
        self.value_head = nn.Linear(width, 1)
        if spec.action_kind == "box":
            self.log_std = nn.Parameter(torch.full((spec.action_dims[0],), log_std_init))
            self.register_buffer("low", torch.as_tensor(spec.action_low, dtype=torch.float32))
            self.register_buffer("high", torch.as_tensor(spec.action_high, dtype=torch.float32))
        if ortho_init:  # the gains of Andrychowicz et al. 2021 / CleanRL: small policy output
            _orthogonal(self.policy_trunk, math.sqrt(2))
            _orthogonal(self.value_trunk, math.sqrt(2))
            _orthogonal(self.policy_head, 0.01)
            _orthogonal(self.value_head, 1.0)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.value_head(self.value_trunk(obs)).squeeze(-1)

    def _heads(self, obs: torch.Tensor):
        features = self.policy_trunk(obs)
        shared = self.value_trunk is self.policy_trunk
        value = self.value_head(features if shared else self.value_trunk(obs)).squeeze(-1)
        return self.policy_head(features), value

    def _distribution(self, out: torch.Tensor) -> list[torch.distributions.Distribution]:
        if self.spec.action_kind == "box":
            return [Normal(out, self.log_std.exp().expand_as(out))]
        return [Categorical(logits=part) for part in out.split(list(self.spec.action_dims), -1)]

    def _log_prob_entropy(self, dists, actions: torch.Tensor):
        if self.spec.action_kind == "box":
            return dists[0].log_prob(actions).sum(-1), dists[0].entropy().sum(-1)
        if self.spec.action_kind == "discrete":
            return dists[0].log_prob(actions), dists[0].entropy()
        log_prob = sum(d.log_prob(actions[..., i]) for i, d in enumerate(dists))
        return log_prob, sum(d.entropy() for d in dists)

    def act(self, obs: torch.Tensor, deterministic: bool = False):
        """``(action, log_prob, value)`` for a batch of observations."""
        out, value = self._heads(obs)
        dists = self._distribution(out)
        if self.spec.action_kind == "box":
            action = out if deterministic else dists[0].sample()
        elif deterministic:
            action = torch.stack([d.probs.argmax(-1) for d in dists], -1)
        else:
            action = torch.stack([d.sample() for d in dists], -1)
        if self.spec.action_kind == "discrete":
            action = action.squeeze(-1)
        log_prob, _ = self._log_prob_entropy(dists, action)
        return action, log_prob, value

    def evaluate(self, obs: torch.Tensor, actions: torch.Tensor):
        """``(log_prob, entropy, value)`` of stored ``actions`` under the current parameters."""
        out, value = self._heads(obs)
        log_prob, entropy = self._log_prob_entropy(self._distribution(out), actions)
        return log_prob, entropy, value

    def forward(self, obs: torch.Tensor, actions: torch.Tensor):
        """``evaluate``: training goes through ``forward`` so that DDP sees it."""
        return self.evaluate(obs, actions)

    def env_action(self, action: torch.Tensor) -> np.ndarray:
        """What the env receives: Gaussian samples clipped to the space, indices as ints."""
        if self.spec.action_kind == "box":
            return torch.clamp(action, self.low, self.high).numpy()
        return action.numpy()
