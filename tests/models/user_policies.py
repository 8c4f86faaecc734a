"""Policies written as a user writes them for ``actor.model.cls`` (docs/embodied.md), on torch
alone: the tests' own modules."""

import math

import torch
from torch import nn
from torch.distributions import Categorical, Independent, Normal


def layer(n_in, n_out, gain):
    linear = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(linear.weight, gain)
    nn.init.zeros_(linear.bias)
    return linear


class SharedMLP(nn.Module):
    """A shared-backbone actor-critic: 64-64 tanh trunk, a categorical or Gaussian head."""

    def __init__(self, observation_space, action_space):
        super().__init__()
        (width,) = observation_space.shape
        self.trunk = nn.Sequential(
            layer(width, 64, math.sqrt(2)), nn.Tanh(), layer(64, 64, math.sqrt(2)), nn.Tanh()
        )
        self.box = action_space.shape != ()
        outputs = action_space.shape[0] if self.box else int(action_space.n)
        self.policy = layer(64, outputs, 0.01)
        self.critic = layer(64, 1, 1.0)
        if self.box:
            self.log_std = nn.Parameter(torch.zeros(outputs))

    def forward(self, obs):
        features = self.trunk(obs)
        out, value = self.policy(features), self.critic(features).squeeze(-1)
        if self.box:
            return Independent(Normal(out, self.log_std.exp().expand_as(out)), 1), value
        return Categorical(logits=out), value


class NoIndependent(SharedMLP):
    """Breaks the protocol on Box actions: per-dimension log-probs."""

    def forward(self, obs):
        dist, value = super().forward(obs)
        return dist.base_dist if self.box else dist, value


class ColumnValues(SharedMLP):
    """Breaks the protocol: [B, 1] values."""

    def forward(self, obs):
        dist, value = super().forward(obs)
        return dist, value[:, None]


class Logits(SharedMLP):
    """Breaks the protocol: logits, not a distribution."""

    def forward(self, obs):
        dist, value = super().forward(obs)
        return dist.logits, value
