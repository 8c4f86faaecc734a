"""A user's embodied policy (``actor.model.cls``), trained as the built-in actor-critic is.

The protocol (docs/embodied.md): a ``torch.nn.Module`` class built as ``cls(observation_space,
action_space)`` (gymnasium spaces: the observations as the policy receives them, a float ``Box``
of the env's shape, one-hot for discrete observation spaces; the env's action space with its
actions counted from 0) whose ``forward(obs)`` takes ``[B, *obs_shape]`` float observations and
returns ``(distribution, values)``: a ``torch.distributions.Distribution`` over the batch's
actions (``log_prob(actions)`` and ``entropy()`` of shape ``[B]``, ``sample()`` the actions'
shape, ``mode`` for deterministic evaluation; e.g. ``Categorical(logits=...)`` or
``Independent(Normal(mean, std), 1)``) and ``[B]`` state values (the actor-critic's value head:
the card's Huber value loss and value clipping apply to them).

``UserPolicy`` gives it the built-in's interface (``act``, ``evaluate``, ``value``): sampling is
drawn from the rollout's own generator (a seed taken from it per call, under a forked global
RNG), so runs resume bit for bit as with the built-in heads.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from rlcore.config.errors import ConfigError

KEY = "actor.model.cls"


def load_policy_class(entry: str, key: str = KEY) -> type:
    """``module:Class`` or ``path/to/file.py:Class`` -> the ``torch.nn.Module`` class (a
    ``ConfigError`` naming ``key`` otherwise)."""
    from rlcore.config.user_files import load_user_class

    return load_user_class(entry, key, base=nn.Module, what="torch.nn.Module class")


def spaces_of(spec: Any) -> tuple[Any, Any]:
    """The gymnasium spaces a user policy is built with, from the run's ``SpaceSpec``."""
    from gymnasium import spaces

    observation = spaces.Box(-np.inf, np.inf, spec.obs_shape, np.float32)
    if spec.action_kind == "discrete":
        return observation, spaces.Discrete(spec.action_dims[0])
    if spec.action_kind == "multi_discrete":
        return observation, spaces.MultiDiscrete(list(spec.action_dims))
    if spec.action_kind == "multi_binary":
        return observation, spaces.MultiBinary(spec.action_dims[0])
    return observation, spaces.Box(spec.action_low, spec.action_high, dtype=np.float32)


class UserPolicy(nn.Module):
    """See the module docstring; ``net``: the user's module."""

    def __init__(self, cls: type, spec: Any, entry: str = "") -> None:
        super().__init__()
        self.spec, self.entry = spec, entry
        try:
            self.net = cls(*spaces_of(spec))
        except Exception as error:
            raise ConfigError(
                f"{KEY}: {entry or cls.__name__}(observation_space, action_space) raised "
                f"{type(error).__name__}: {error}"
            ) from None

    def act(
        self,
        obs: torch.Tensor,
        deterministic: bool = False,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        dist, value = self.net(obs)
        if deterministic:
            action = dist.mode
        elif generator is None:
            action = dist.sample()
        else:  # the distribution samples from torch's global RNG: seeded from ``generator``
            seed = int(torch.randint(2**62, (1,), generator=generator, device=generator.device))
            devices = [obs.device] if obs.device.type == "cuda" else []
            with torch.random.fork_rng(devices=devices):
                torch.manual_seed(seed)
                action = dist.sample()
        return action, dist.log_prob(action), value

    def evaluate(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        dist, value = self.net(obs)
        return dist.log_prob(actions), dist.entropy(), value

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)[1]

    def forward(self, obs: torch.Tensor, actions: torch.Tensor):
        """``evaluate``: training goes through ``forward`` so that DDP sees it."""
        return self.evaluate(obs, actions)


def check_user_policy(entry: str, spec: Any) -> None:
    """``entry``'s class built for ``spec`` and run on two observations: one line naming what
    breaks the protocol (see the module docstring)."""
    policy = UserPolicy(load_policy_class(entry), spec, entry)
    obs = torch.zeros((2, *spec.obs_shape))
    where = f"{KEY}: {entry}"
    try:
        out = policy.net(obs)
    except Exception as error:
        raise ConfigError(f"{where}: forward on [2, *obs_shape] raised {error}") from None
    if not (isinstance(out, tuple) and len(out) == 2):
        raise ConfigError(f"{where}: forward must return (distribution, values)")
    dist, values = out
    if not isinstance(dist, torch.distributions.Distribution):
        raise ConfigError(
            f"{where}: forward's first output must be a torch.distributions.Distribution, "
            f"not {type(dist).__name__}"
        )
    if not (isinstance(values, torch.Tensor) and values.shape == (2,)):
        shape = tuple(values.shape) if isinstance(values, torch.Tensor) else type(values).__name__
        raise ConfigError(f"{where}: values must be [B] (got {shape} for B=2)")
    wanted = {"discrete": (2,), "multi_discrete": (2, len(spec.action_dims))}
    action_shape = wanted.get(spec.action_kind, (2, *spec.action_dims))
    with torch.no_grad():
        action = dist.sample()
        if tuple(action.shape) != action_shape:
            raise ConfigError(
                f"{where}: its distribution samples actions of shape {tuple(action.shape)}; the "
                f"env's {spec.action_kind} actions need {action_shape} for B=2 (for a Box, wrap "
                "the per-dimension distribution in Independent(..., 1))"
            )
        for name, value in (("log_prob", dist.log_prob(action)), ("entropy", dist.entropy())):
            if tuple(value.shape) != (2,):
                raise ConfigError(
                    f"{where}: {name} must be [B] (got {tuple(value.shape)} for B=2); sum it "
                    "over action dimensions (Independent(..., 1))"
                )
