"""Find an environment by name: rlcore's registry, a ``module.path:ClassName``, or a gymnasium id.

@register_env("corridor")
def make_corridor(**kwargs):
    return Corridor(**kwargs)

env.id: corridor                  # registered here
env.id: my_pkg.envs:Corridor      # any importable gymnasium.Env class, no registration
env.id: CartPole-v1               # any registered gymnasium id
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from rlcore.config.errors import ConfigError
from rlcore.did_you_mean import closest

EnvFactory = Callable[..., gym.Env]
_ENVS: dict[str, EnvFactory] = {}


class EnvError(ConfigError):
    """An env that cannot be made or used: names ``env.id`` and what to do."""


def register_env(name: str) -> Callable[[EnvFactory], EnvFactory]:
    """Register a factory (a function or an Env class) under ``name``, usable as ``env.id``."""

    def decorator(factory: EnvFactory) -> EnvFactory:
        if name in _ENVS:
            raise ValueError(f"env '{name}' is already registered; pick another name")
        _ENVS[name] = factory
        return factory

    return decorator


def registered_envs() -> list[str]:
    return sorted(_ENVS)


def resolve_env(env_id: str) -> str | EnvFactory:
    """The gymnasium id or the factory ``env_id`` names; ``EnvError`` with close matches if none."""
    if env_id in _ENVS:
        return _ENVS[env_id]
    if ":" in env_id and not env_id.startswith(":"):
        module_name, _, attr = env_id.partition(":")
        if "/" not in module_name and attr.isidentifier():
            return _import_entry_point(env_id, module_name, attr)
    if env_id in gym.registry:
        return env_id
    known = [*gym.registry.keys(), *_ENVS]
    near = closest(env_id, known, n=3)
    hint = f"; did you mean {', '.join(repr(n) for n in near)}?" if near else ""
    raise EnvError(
        f"env.id: no environment '{env_id}'{hint} Use a gymnasium id, a name registered with "
        "envs.register_env, or 'module.path:ClassName'"
    )


def _import_entry_point(env_id: str, module_name: str, attr: str) -> EnvFactory:
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise EnvError(
            f"env.id: cannot import module '{module_name}' of '{env_id}': {exc}"
        ) from None
    factory = getattr(module, attr, None)
    if factory is None:
        names = [n for n in dir(module) if not n.startswith("_")]
        near = closest(attr, names)
        hint = f" (did you mean '{module_name}:{near[0]}'?)" if near else ""
        raise EnvError(f"env.id: module '{module_name}' has no '{attr}'{hint}")
    if not callable(factory):
        raise EnvError(f"env.id: '{env_id}' is not a class or function that makes an env")
    return factory


def make_env(env_id: str, **kwargs: Any) -> gym.Env:
    """One environment, by any of the names ``resolve_env`` accepts."""
    target = resolve_env(env_id)
    env = gym.make(target, **kwargs) if isinstance(target, str) else target(**kwargs)
    if not isinstance(env, gym.Env):
        raise EnvError(f"env.id: '{env_id}' made a {type(env).__name__}, not a gymnasium.Env")
    return env
