"""Find an environment by name: rlcore's registry, a ``module.path:ClassName``, or a gymnasium id.

@register_env("corridor")
def make_corridor(**kwargs):
    return Corridor(**kwargs)

env.id: corridor                  # registered here
env.id: my_pkg.envs:Corridor      # any importable gymnasium.Env class, no registration
env.id: CartPole-v1               # any registered gymnasium id
env.id: my_pkg.envs:Corridor-v0   # an id my_pkg.envs registers (gymnasium.register), as
                                  # gym.make reads it: the module imported, then the id made

rlcore's own names (``color_reach``) are gymnasium ids too: ``gym.make("color_reach")`` works
once ``rlcore.envs`` is imported.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym

from rlcore.config.errors import ConfigError
from rlcore.config.user_files import import_user_file
from rlcore.did_you_mean import closest

EnvFactory = Callable[..., gym.Env]
_ENVS: dict[str, EnvFactory] = {}


class EnvError(ConfigError):
    """An env that cannot be made or used: names ``env.id`` and what to do."""


def register_env(name: str) -> Callable[[EnvFactory], EnvFactory]:
    """Register a factory (a function or an Env class) under ``name``, usable as ``env.id``,
    and as a gymnasium id (``gym.make(name)``) unless gymnasium already has one of that name."""

    def decorator(factory: EnvFactory) -> EnvFactory:
        if name in _ENVS:
            raise ValueError(f"env '{name}' is already registered; pick another name")
        _ENVS[name] = factory
        if name not in gym.registry:  # (rlcore's own lookup reads _ENVS first either way)
            gym.register(name, entry_point=factory)
        return factory

    return decorator


def registered_envs() -> list[str]:
    return sorted(_ENVS)


def resolve_env(env_id: str) -> str | EnvFactory:
    """The gymnasium id or the factory ``env_id`` names; ``EnvError`` with close matches if none."""
    if env_id in _ENVS:
        return _ENVS[env_id]
    if ":" in env_id and not env_id.startswith(":"):
        module_name, _, attr = env_id.rpartition(":")
        if module_name.endswith(".py") and attr.isidentifier():
            return _file_entry_point(env_id, Path(module_name).expanduser(), attr)
        if "/" not in module_name and attr.isidentifier():
            return _import_entry_point(env_id, module_name, attr)
        if "/" not in module_name and module_name and not module_name.endswith(".py"):
            return _registered_by_module(env_id, module_name, attr)
    if env_id in gym.registry:
        return env_id
    known = [*gym.registry.keys(), *_ENVS]
    near = closest(env_id, known, n=3)
    hint = f"; did you mean {', '.join(repr(n) for n in near)}?" if near else ""
    raise EnvError(
        f"env.id: no environment '{env_id}'{hint} Use a gymnasium id, a name registered with "
        "envs.register_env, 'module.path:ClassName' or 'path/to/file.py:ClassName'"
    )


def _file_entry_point(env_id: str, file: Path, attr: str) -> str | EnvFactory:
    """``path/to/file.py:Class``, as ``reward.rules.custom_fn`` names a file: the file imported as a
    module of its own (kept in ``sys.modules``, so its envs pickle)."""
    if not file.is_file():
        raise EnvError(f"env.id: {file} (of '{env_id}') does not exist")
    name = f"rlcore_user_env_{hashlib.sha256(str(file.resolve()).encode()).hexdigest()[:12]}"
    module = import_user_file(file, name, "env.id", file, keep=True, error=EnvError)
    return _entry(env_id, module, str(file), attr)


def _import_entry_point(env_id: str, module_name: str, attr: str) -> str | EnvFactory:
    return _entry(env_id, _imported(env_id, module_name), module_name, attr)


def _imported(env_id: str, module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise EnvError(
            f"env.id: cannot import module '{module_name}' of '{env_id}': {exc}; a module of "
            "your own must be importable from where the run starts: run from its folder, add "
            "that folder to PYTHONPATH, or name the file (env.id=path/to/file.py:ClassName)"
        ) from None


def _registered_by_module(env_id: str, module_name: str, gym_id: str) -> str:
    """``module:Id-v0``, as ``gym.make`` reads it: ``module`` imported (it registers ``Id-v0``
    with ``gymnasium.register``), then the gymnasium id. The id is returned without the module:
    every process of the run resolves ``env.id`` itself, importing the module first."""
    module = _imported(env_id, module_name)
    if gym_id in gym.registry:
        return gym_id
    near = closest(gym_id, [*gym.registry.keys(), *(n for n in dir(module) if n[:1] != "_")])
    hint = f" (did you mean '{module_name}:{near[0]}'?)" if near else ""
    raise EnvError(
        f"env.id: module '{module_name}' registers no gymnasium id '{gym_id}'{hint}; register "
        f"it there with gymnasium.register('{gym_id}', entry_point=...), or name a class "
        f"('{module_name}:ClassName')"
    )


def _entry(env_id: str, module: Any, module_name: str, attr: str) -> str | EnvFactory:
    factory = getattr(module, attr, None)
    if factory is None and attr in gym.registry:  # (``module:Id``: an id without a version)
        return attr
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
    try:
        env = gym.make(target, **kwargs) if isinstance(target, str) else target(**kwargs)
    except TypeError as exc:
        if not kwargs:
            raise
        raise EnvError(f"env.kwargs: '{env_id}' refused {kwargs}: TypeError: {exc}") from exc
    if not isinstance(env, gym.Env):
        raise EnvError(f"env.id: '{env_id}' made a {type(env).__name__}, not a gymnasium.Env")
    return env


# gym.make's own keywords (gym.make(id, max_episode_steps=..., disable_env_checker=...)), taken
# besides the env's constructor's when the copies are made one by one
_GYM_MAKE_KEYWORDS = ("max_episode_steps", "disable_env_checker")


def check_env_kwargs(env_id: str, kwargs: dict[str, Any], native: bool) -> None:
    """``EnvError`` naming ``env.kwargs.<name>`` for an argument that the constructor of
    ``env_id`` does not take (``native``: the copies are made by the id's vector entry point);
    nothing is checked where a constructor takes ``**kwargs`` (``accepted_arguments``). A
    gymnasium entry point may say what it takes itself: an ``env_arguments(spec_kwargs)``
    attribute returning the names (or None: any), as ManiSkill's do."""
    if not kwargs:
        return
    target = resolve_env(env_id)
    if isinstance(target, str):
        spec = gym.spec(target)
        vector = native and spec.vector_entry_point is not None
        creator = _creator(spec.vector_entry_point if vector else spec.entry_point)
        declared = getattr(creator, "env_arguments", None)
        if declared is not None:  # (the creator says what it takes: ManiSkill's)
            names = declared(spec.kwargs)
        elif vector:
            names = accepted_arguments(creator, skip=("num_envs",))
        else:
            names = accepted_arguments(creator)
            names = None if names is None else names | set(_GYM_MAKE_KEYWORDS)
    else:
        names = accepted_arguments(target)
    unknown = [name for name in kwargs if names is not None and name not in names]
    if unknown:
        near = closest(unknown[0], sorted(names or ()))
        hint = f" (did you mean '{near[0]}'?)" if near else ""
        raise EnvError(
            f"env.kwargs.{unknown[0]}: '{env_id}' takes no argument '{unknown[0]}'{hint}; it "
            f"takes {', '.join(sorted(names or ())) or 'none'}"
        )


def _creator(entry_point: str | Callable[..., Any]) -> Callable[..., Any]:
    from gymnasium.envs.registration import load_env_creator

    return load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point


def accepted_arguments(
    creator: Callable[..., Any], skip: tuple[str, ...] = (), passed_on: bool = False
) -> set[str] | None:
    """The keyword arguments ``creator`` takes; None where it takes any (``**kwargs``), as a
    constructor may read any name itself. ``passed_on``: ``creator`` is a class whose
    ``__init__``s pass ``**kwargs`` on to the next one in its method order (as ManiSkill's tasks
    do, down to ``BaseEnv``): their names together, ending at one without ``**kwargs`` (or at
    ``object``'s: any)."""
    inits = (
        [c.__dict__["__init__"] for c in creator.__mro__ if "__init__" in c.__dict__]
        if isinstance(creator, type)
        else [creator]
    )
    names: set[str] = set()
    for init in inits:
        if init is object.__init__:
            return None
        try:
            parameters = inspect.signature(init).parameters.values()
        except (TypeError, ValueError):  # (a builtin without a signature)
            return None
        keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        names |= {p.name for p in parameters if p.kind in keyword and p.name != "self"}
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            return names - set(skip)
        if not passed_on:
            return None
    return None


def solved_threshold(env_id: str, given: float | str | None) -> float | None:
    """``env.solved_threshold`` as a number: ``given`` when it is one (or null: None); for
    ``env``, the env's own ``spec.reward_threshold`` (a gymnasium id that declares one), else
    None: an env never inherits another's threshold."""
    if given != "env":
        return None if given is None else float(given)
    target = resolve_env(env_id)
    threshold = gym.spec(target).reward_threshold if isinstance(target, str) else None
    return None if threshold is None else float(threshold)
