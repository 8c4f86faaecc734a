"""Vectorised environments with gymnasium's next-step autoreset, and the space checks the
policies need.

With next-step autoreset, the observation returned by a step that ends an episode is the
episode's final observation; the following step ignores the action, resets that env, and
returns its first observation with reward 0. The embodied runner masks that reset step out, and
reads V(final observation) from the policy's forward pass on it (see runners/embodied.py).
"""

from __future__ import annotations

import dataclasses
import re
import signal
import threading
import traceback
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch

from rlcore.config.fields import thawed
from rlcore.envs.language import TextStateBox, language_problem, text_observations
from rlcore.envs.registry import EnvError, check_env_kwargs, make_env, resolve_env
from rlcore.scheduler import last_words
from rlcore.scheduler.last_words import NOT_USER_CODE

NONE: Mapping[str, Any] = MappingProxyType({})
VectorMode = Literal["auto", "native", "sync", "async"]


@dataclass(frozen=True)
class SpaceSpec:
    """What a policy needs to know about an env's spaces."""

    obs_shape: tuple[int, ...]  # (D,) vectors or (H, W, C) images
    action_kind: Literal["discrete", "multi_discrete", "multi_binary", "box"]
    # discrete: (n,); multi_discrete: nvec; multi_binary: (n,) bits; box: shape
    action_dims: tuple[int, ...]
    action_low: np.ndarray | None = None
    action_high: np.ndarray | None = None
    obs_scale: float = 1.0  # 1/255 for uint8 images, so the network sees [0, 1]
    # discrete kinds: the env's first action (gymnasium's ``start``; per dimension for
    # MultiDiscrete), added to the policy's index 0..n-1; None where every start is 0
    action_start: tuple[int, ...] | None = None
    # Discrete / MultiDiscrete observations, seen one-hot: each dimension's size and start
    # (None for Box observations)
    obs_one_hot: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    # language-conditioned observations (``envs.language``): the instruction's length in
    # characters at the start of each observation, and its character set (None: no text)
    obs_text: tuple[int, str] | None = None
    # a language-conditioned observation's camera image (H, W, C), flattened after the text
    # (None: no image)
    obs_image: tuple[int, int, int] | None = None

    def encode(self, raw: np.ndarray) -> np.ndarray:
        """Observations as the env returns them, one-hot as the policy sees them (unchanged
        for Box observations); one observation or a batch."""
        if self.obs_one_hot is None:
            return raw
        sizes, starts = self.obs_one_hot
        raw = np.asarray(raw, dtype=np.int64).reshape(-1, len(sizes))
        parts = [
            np.eye(n, dtype=np.int64)[raw[:, i] - s]
            for i, (n, s) in enumerate(zip(sizes, starts, strict=True))
        ]
        return np.concatenate(parts, axis=1)


def _registered_vector_env(
    env_id: str,
    target: str,
    num_envs: int,
    mode: VectorMode,
    env_kwargs: dict[str, Any],
    seeds_per_env: bool,
) -> gym.vector.VectorEnv:
    """``make_vector_env`` of an id registered with gymnasium (``target``, what ``env_id``
    resolves to): its native vector version where ``mode`` takes it, else copies."""
    native = gym.spec(target).vector_entry_point is not None
    if mode == "native" and not native:
        raise EnvError(f"env.vector_mode: '{env_id}' has no native vector version; use sync")
    if mode == "native" and seeds_per_env:
        raise EnvError(
            f"env.vector_mode: native '{env_id}' resets every env from one seed, and "
            "algorithm.group_size > 1 resets each group from its own; use sync or async"
        )
    native = native and not seeds_per_env
    chosen = "vector_entry_point" if mode in ("native", "auto") and native else mode
    chosen = "sync" if chosen == "auto" else chosen
    if chosen == "async":
        return gym.vector.AsyncVectorEnv(
            [_ignoring_sigint(lambda: text_observations(gym.make(target, **env_kwargs)))] * num_envs
        )
    if chosen == "sync":
        return gym.make_vec(target, num_envs, "sync", wrappers=[text_observations], **env_kwargs)
    return gym.make_vec(target, num_envs=num_envs, vectorization_mode=chosen, **env_kwargs)


def make_vector_env(
    env_id: str,
    num_envs: int,
    mode: VectorMode = "auto",
    env_kwargs: Mapping[str, Any] = NONE,
    seeds_per_env: bool = False,
) -> gym.vector.VectorEnv:
    """``num_envs`` copies of ``env_id`` stepped together.

    mode: ``native`` uses the env's own vectorised implementation (CartPole has one: no Python
    loop over envs); ``sync`` steps copies in this process; ``async`` in one subprocess each;
    ``auto`` takes native when the env has it, else sync. ``env_kwargs`` (``env.kwargs``) go to
    the env's constructor, each checked against its signature first (``check_env_kwargs``).
    ``seeds_per_env``: the envs will be reset with a seed each (embodied GRPO's groups), which
    a native vector env (one seed for all) cannot take: ``auto`` then picks sync, and
    ``native`` is refused.
    """
    env_kwargs = thawed(env_kwargs)
    if "num_envs" in env_kwargs:
        raise EnvError("env.kwargs.num_envs: the number of copies is env.num_envs; set that")
    check_env_kwargs(env_id, env_kwargs, native=mode in ("native", "auto"))
    target = resolve_env(env_id)
    if isinstance(target, str):
        envs = _registered_vector_env(env_id, target, num_envs, mode, env_kwargs, seeds_per_env)
    else:
        if mode == "native":
            raise EnvError(f"env.vector_mode: '{env_id}' has no native vector version; use sync")

        def factory() -> gym.Env:
            return text_observations(make_env(env_id, **env_kwargs))

        if mode == "async":
            envs = gym.vector.AsyncVectorEnv([_ignoring_sigint(factory)] * num_envs)
        else:
            envs = gym.vector.SyncVectorEnv([factory] * num_envs)
    autoreset = envs.metadata.get("autoreset_mode", gym.vector.AutoresetMode.NEXT_STEP)
    if autoreset != gym.vector.AutoresetMode.NEXT_STEP:
        raise EnvError(f"env.id: '{env_id}' vectorises with {autoreset}; rlcore needs next-step")
    if isinstance(envs.single_observation_space, gym.spaces.Discrete | gym.spaces.MultiDiscrete):
        # one-hot, as SB3 encodes them (gymnasium's flatten: index - start; MultiDiscrete
        # concatenates one one-hot per dimension)
        envs = gym.wrappers.vector.FlattenObservation(envs)
    return envs


def _ignoring_sigint(factory: Callable[[], gym.Env]) -> Callable[[], gym.Env]:
    """``factory`` run in an env subprocess that ignores SIGINT: Ctrl-C reaches the whole
    process group, and it is the run's to handle (it stops after the iteration and closes its
    envs); an env process dying of it mid-step would break that."""

    def make() -> gym.Env:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        return factory()

    return make


def space_spec(envs: gym.vector.VectorEnv, env_id: str) -> SpaceSpec:
    """The policy-facing description of the spaces; ``EnvError`` for spaces rlcore can't handle."""
    spec = _space_spec(envs, env_id)
    if isinstance(envs.single_observation_space, TextStateBox):
        text = envs.single_observation_space
        spec = dataclasses.replace(
            spec, obs_text=(text.text_length, text.charset), obs_image=text.image_shape
        )
    raw = getattr(envs, "env", envs).single_observation_space  # (under FlattenObservation)
    if isinstance(raw, gym.spaces.Discrete):
        spec = dataclasses.replace(spec, obs_one_hot=((int(raw.n),), (int(raw.start),)))
    elif isinstance(raw, gym.spaces.MultiDiscrete):
        sizes = tuple(int(n) for n in raw.nvec.ravel())
        starts = tuple(int(s) for s in np.asarray(raw.start).ravel())
        spec = dataclasses.replace(spec, obs_one_hot=(sizes, starts))
    return spec


def _space_spec(envs: gym.vector.VectorEnv, env_id: str) -> SpaceSpec:
    obs, act = envs.single_observation_space, envs.single_action_space
    if isinstance(obs, gym.spaces.Dict) and "instruction" in obs.spaces:  # meant for language
        problem = language_problem(obs) or (
            "an instruction and a state through its native vector version, which rlcore does "
            "not flatten; use env.vector_mode sync or async"
        )
        raise EnvError(f"env.id: '{env_id}' observes {problem}")
    if not isinstance(obs, gym.spaces.Box) or len(obs.shape) not in (1, 3):
        raise EnvError(
            f"env.id: '{env_id}' observes {obs}; rlcore's policies take Box observations, "
            "vectors (D,) or images (H, W, C), Discrete or MultiDiscrete ones (one-hot), and a "
            "Dict of an 'instruction' Text and a 'state' Box (language-conditioned); flatten "
            "others with a gymnasium wrapper (FlattenObservation)"
        )
    scale = 1.0 / 255.0 if obs.dtype == np.uint8 else 1.0
    if isinstance(act, gym.spaces.Discrete):
        start = (int(act.start),) if int(act.start) else None
        return SpaceSpec(obs.shape, "discrete", (int(act.n),), obs_scale=scale, action_start=start)
    if isinstance(act, gym.spaces.MultiDiscrete):
        dims = tuple(int(n) for n in act.nvec.ravel())
        starts = tuple(int(s) for s in np.asarray(act.start).ravel())
        start = starts if any(starts) else None
        return SpaceSpec(obs.shape, "multi_discrete", dims, obs_scale=scale, action_start=start)
    if isinstance(act, gym.spaces.MultiBinary) and len(act.shape) == 1:
        return SpaceSpec(obs.shape, "multi_binary", act.shape, obs_scale=scale)
    if isinstance(act, gym.spaces.Box) and len(act.shape) == 1:
        return SpaceSpec(obs.shape, "box", act.shape, act.low.copy(), act.high.copy(), scale)
    raise EnvError(
        f"env.id: '{env_id}' acts in {act}, which rlcore's policies do not handle; they take "
        f"Discrete, MultiDiscrete, 1-D MultiBinary and 1-D Box actions: {_action_way_on(act)}"
    )


def _action_way_on(act: gym.Space) -> str:
    """How an env whose actions ``_space_spec`` refuses can act in a space rlcore takes."""
    if isinstance(act, gym.spaces.Box | gym.spaces.MultiBinary):
        return "flatten the action to 1-D in a gymnasium.ActionWrapper (reshape it back there)"
    if isinstance(act, gym.spaces.Dict | gym.spaces.Tuple):
        return (
            "flatten it with a gymnasium.ActionWrapper whose action_space is "
            "gymnasium.spaces.flatten_space(space) and whose action() unflattens it"
        )
    return "map it onto one of those in a gymnasium.ActionWrapper"


class _StepTimeout(Exception):
    pass


def _raise_timeout(signum: int, frame: object) -> None:
    raise _StepTimeout


def step_within(
    envs: gym.vector.VectorEnv, actions: np.ndarray, timeout_s: float | None, what: str
) -> tuple:
    """``envs.step(actions)``; an env that fails (an exception, observations that do not fit
    its space) is an ``EnvError`` naming ``what`` and the error, in one line."""
    return _guarded(envs, _Call("step", (actions,), {}, timeout_s, what))


def reset_within(
    envs: gym.vector.VectorEnv, seed: int | list[int], timeout_s: float | None, what: str
) -> tuple:
    """``envs.reset(seed=seed)`` (one seed, or one per env) under the same guard and deadline
    as a step."""
    return _guarded(envs, _Call("reset", (), {"seed": seed}, timeout_s, what))


@dataclass(frozen=True)
class _Call:
    """``envs.<op>(*args, **kwargs)`` (``op``: step or reset) within ``timeout_s`` (None: no
    limit), ``what`` naming the envs in an error."""

    op: str
    args: tuple
    kwargs: dict
    timeout_s: float | None
    what: str


def _guarded(envs: gym.vector.VectorEnv, call: _Call) -> tuple:
    reports: list[warnings.WarningMessage] = []
    try:
        if isinstance(envs, gym.vector.AsyncVectorEnv):
            with warnings.catch_warnings(record=True) as reports:
                return _timed(envs, call)
        return _timed(envs, call)
    except EnvError:
        raise
    except Exception as error:
        first = (str(error).splitlines() or [""])[0]
        place = _where(error, [str(w.message) for w in reports])
        raise EnvError(
            f"env.id: {call.what} failed: {type(error).__name__}: {first}{place}"
        ) from error
    finally:
        _reissue(reports)


# gymnasium's subprocess envs report a failing env by warnings (one with the worker's
# traceback) before re-raising the bare exception; the error above says it in one line. The
# other warnings of the step (the envs' own print in their subprocesses) are passed on.
_ASYNC_REPORTS = re.compile(
    r"ERROR: (Received the following error from Worker|Traceback|Raising the last exception)"
)
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def _reissue(caught: list[warnings.WarningMessage]) -> None:
    """The warnings a subprocess env step raised, but gymnasium's report of a failed env."""
    for w in caught:
        if not _ASYNC_REPORTS.search(str(w.message)):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


def _where(error: BaseException, reports: list[str]) -> str:
    """`` (at FILE:LINE in FUNCTION)``: where the env raised ``error``; from its traceback, or
    for a subprocess env from the traceback in gymnasium's report."""
    frames = [(f.filename, f.lineno, f.name) for f in traceback.extract_tb(error.__traceback__)]
    for report in reports:
        frames += [(f, int(n), name) for f, n, name in _FRAME.findall(report)]
    users = [f for f in frames if not f[0].startswith(NOT_USER_CODE)]
    return f" (at {users[-1][0]}:{users[-1][1]} in {users[-1][2]})" if users else ""


def _timed(envs: gym.vector.VectorEnv, call: _Call) -> tuple:
    """``call``'s result, or ``EnvError`` naming its ``what`` when it takes over its
    ``timeout_s``. Subprocess envs are waited for with a timeout (then closed with
    ``terminate=True``); in-process envs are interrupted by a timer signal, which Python
    delivers between bytecodes and to blocking calls, and only in the main thread: elsewhere the
    limit is refused, naming the fix. A C routine holding the GIL delays the signal until it
    returns: past ``last_words.watchdog_s(timeout_s)`` a watchdog ends the process
    (scheduler/last_words.py), which the driver then names in one line."""
    op, args, kwargs, timeout_s, what = call.op, call.args, call.kwargs, call.timeout_s, call.what
    if timeout_s is None:
        return getattr(envs, op)(*args, **kwargs)
    message = (
        f"env.step_timeout_s: {what} took over {timeout_s:g} s; the env hangs or is slower "
        "than that: fix it, or raise env.step_timeout_s"
    )
    if isinstance(envs, gym.vector.AsyncVectorEnv):
        import multiprocessing

        getattr(envs, f"{op}_async")(*args, **kwargs)
        try:
            return getattr(envs, f"{op}_wait")(timeout=timeout_s)
        except multiprocessing.TimeoutError:
            envs.close(terminate=True)
            raise EnvError(message) from None
    if threading.current_thread() is not threading.main_thread():
        raise EnvError(
            "env.step_timeout_s: in-process envs are timed by a signal, which only the main "
            "thread receives, and this run steps them in another thread; use "
            "env.vector_mode=async (subprocess envs), or leave the limit out"
        )
    previous = signal.signal(signal.SIGALRM, _raise_timeout)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        with last_words.watch(last_words.watchdog_s(timeout_s), who=what.split(", ")[0]):
            return getattr(envs, op)(*args, **kwargs)
    except _StepTimeout:
        raise EnvError(message) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def check_output(
    env_id: str,
    where: str,
    obs: np.ndarray | torch.Tensor,
    reward: np.ndarray | torch.Tensor | None,
    obs_shape: tuple,
) -> None:
    """Stop on NaN or inf from an env, or observations of another shape than its space
    declares, naming it and ``where`` (step or reset), instead of training on garbage."""
    got = tuple(np.shape(obs))[1:]
    if got != tuple(obs_shape):
        raise EnvError(
            f"env.id: '{env_id}' returned observations of shape {got} from {where}, and its "
            f"observation_space declares {tuple(obs_shape)}; make them agree"
        )
    for name, values in (("observation", obs), ("reward", reward)):
        if values is not None and not _finite(values):
            raise EnvError(
                f"env.id: '{env_id}' returned a non-finite {name} (NaN or inf) from {where}"
            )


def _finite(values: np.ndarray | torch.Tensor) -> bool:
    if isinstance(values, torch.Tensor):
        return bool(torch.isfinite(values).all())  # on the tensor's device: one flag comes back
    return bool(np.isfinite(values).all())


def tensor_device(envs: gym.vector.VectorEnv) -> torch.device | None:
    """The device of a *tensor env*, else None.

    A tensor env is a vector env that can keep its batches as torch tensors on its own device
    (ManiSkill's GPU scene, ``rlcore.envs.maniskill.NextStepVectorEnv``): it has a
    ``tensor_device`` and a ``numpy`` switch. Set ``numpy`` False and ``reset``/``step`` return
    observations (float32), rewards (float32) and terminated/truncated flags (bool) as tensors on
    that device and take actions as tensors; left True, it is a plain numpy vector env.
    """
    device = getattr(envs, "tensor_device", None)
    return device if device is not None and hasattr(envs, "numpy") else None
