"""ManiSkill3 tasks as rlcore envs: ``env.id: maniskill/PickCube-v1``.

Each task in ``MANISKILL_TASKS`` is a gymnasium id in the ``maniskill/`` namespace, so
``env.vector_mode`` picks how its copies run (rlcore/envs/vector.py):

- ``async`` (or ``sync``): one ManiSkill env per copy on SAPIEN's CPU PhysX, each in its own
  subprocess, unbatched and in numpy through ManiSkill's ``CPUGymWrapper``;
- ``native`` (and ``auto``): ManiSkill's own batched env, every copy in one GPU PhysX scene
  stepped by ``ManiSkillVectorEnv``, when CUDA is visible; without CUDA this falls back to the
  async CPU copies above, so ``auto`` works on any machine.

Defaults follow ManiSkill's PPO baseline: state observations, ``pd_joint_delta_pos`` control and
the ``normalized_dense`` reward. ``env.kwargs`` (``{control_mode: pd_ee_delta_pos}``,
``{sim_backend: cpu}``) overrides them; ``register_maniskill_task`` adds other tasks.

``mani_skill`` (the ``maniskill`` extra) is imported only when such an env is made. SAPIEN needs
a Vulkan driver even on the CPU and with nothing rendered (Mesa >= 25 lavapipe on Debian 12:
``.ci/install_vulkan.sh``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch

from rlcore.envs.registry import EnvError, accepted_arguments

NAMESPACE = "maniskill"
# Single-arm Panda tasks with flat state observations and a Box action space, no asset download.
MANISKILL_TASKS = (
    "PickCube-v1",
    "PushCube-v1",
    "PullCube-v1",
    "StackCube-v1",
    "PegInsertionSide-v1",
)
DEFAULTS: dict[str, Any] = {
    "obs_mode": "state",
    "control_mode": "pd_joint_delta_pos",
    "reward_mode": "normalized_dense",
    "sim_backend": "auto",  # auto: GPU for the native vector env when CUDA is visible, else CPU
    "ignore_terminations": False,  # True: episodes end only at the time limit, not on success
}
_CPU_NAMES = ("cpu", "physx_cpu")
_GPU_NAMES = ("gpu", "cuda", "physx_cuda")


def register_maniskill_task(task: str, **defaults: Any) -> str:
    """Register ManiSkill's ``task`` as the gymnasium id ``maniskill/<task>``; returns the id.

    ``defaults`` override ``DEFAULTS`` and reach ``gym.make(task, ...)`` of ManiSkill; a second
    call for the same task keeps the first registration.
    """
    env_id = f"{NAMESPACE}/{task}"
    if env_id not in gym.registry:
        gym.register(
            env_id,
            entry_point=f"{__name__}:make_maniskill_env",
            vector_entry_point=f"{__name__}:make_maniskill_vector_env",
            kwargs={"task": task, **DEFAULTS, **defaults},
            disable_env_checker=True,  # ManiSkill's spaces and infos are checked by its wrappers
        )
    return env_id


def make_maniskill_env(
    task: str,
    *,
    sim_backend: str = "auto",
    ignore_terminations: bool = False,
    **kwargs: Any,
) -> gym.Env:
    """One ManiSkill env on the CPU with the plain gymnasium API (numpy, unbatched).

    kwargs go to ManiSkill's ``gym.make(task, ...)``: obs_mode, control_mode, reward_mode,
    max_episode_steps, ...
    """
    images = _image_mode(task, kwargs)
    if _backend(sim_backend, gpu_available=False) != "cpu":
        raise EnvError(
            f"env.id: 'maniskill/{task}' with sim_backend={sim_backend} runs ManiSkill's batched "
            "GPU env, which is a whole vector env: use env.vector_mode native (or auto)"
        )
    _import_mani_skill(task)
    from mani_skill.utils.wrappers.gymnasium import CPUGymWrapper

    env = _vulkan_checked(
        task, lambda: gym.make(task, num_envs=1, sim_backend="physx_cpu", **_ms_kwargs(kwargs))
    )
    if images:
        env = _rgb_only(env)
    env = CPUGymWrapper(env, ignore_terminations=ignore_terminations)
    return RGBObservation(env) if images else env


def make_maniskill_vector_env(
    num_envs: int,
    task: str,
    *,
    sim_backend: str = "auto",
    ignore_terminations: bool = False,
    **kwargs: Any,
) -> gym.vector.VectorEnv:
    """``num_envs`` copies of ``task``: one batched GPU scene, or CPU envs in subprocesses.

    The GPU one is ManiSkill's documented ``ManiSkillVectorEnv(env, auto_reset=False, ...)``
    over ``gym.make(task, num_envs=num_envs, sim_backend="physx_cuda", ...)``, wrapped by
    ``NextStepVectorEnv`` for rlcore's next-step autoreset and numpy arrays.
    """
    gpu_available = torch.cuda.is_available()
    images = _image_mode(task, kwargs)
    if _backend(sim_backend, gpu_available) == "cpu":
        factory = functools.partial(
            make_maniskill_env,
            task,
            sim_backend="cpu",
            ignore_terminations=ignore_terminations,
            **kwargs,
        )
        if images:  # SAPIEN's renderer hangs in forked subprocesses: copies in this process
            return gym.vector.SyncVectorEnv([factory] * num_envs)
        return gym.vector.AsyncVectorEnv([factory] * num_envs)
    if not gpu_available:
        raise EnvError(
            f"env.id: 'maniskill/{task}' with sim_backend={sim_backend} needs CUDA, and torch "
            "sees none: use sim_backend cpu (or auto)"
        )
    _import_mani_skill(task)
    from mani_skill.vector.wrappers.gymnasium import ManiSkillVectorEnv

    backend = "physx_cuda" if sim_backend == "auto" else sim_backend
    env = _vulkan_checked(
        task, lambda: gym.make(task, num_envs=num_envs, sim_backend=backend, **_ms_kwargs(kwargs))
    )
    if images:
        env = _rgb_only(env)
    batched = ManiSkillVectorEnv(
        env, auto_reset=False, ignore_terminations=ignore_terminations, record_metrics=False
    )
    return NextStepVectorEnv(batched, key="rgb" if images else None)


class NextStepVectorEnv(gym.vector.VectorEnv):
    """A batched ManiSkill env (``ManiSkillVectorEnv`` with ``auto_reset=False``) with
    gymnasium's next-step autoreset.

    ManiSkill's own autoreset is same-step. Here the step after an episode ends resets just the
    envs that ended (a partial reset of the GPU scene) and returns their first observation with
    reward 0, terminated and truncated False; those envs' actions are ignored. The other envs
    step as usual.

    It speaks gymnasium's numpy on the CPU by default. It is also a *tensor env*
    (``rlcore.envs.vector.tensor_device``): with ``numpy`` set False (the embodied env worker
    does this), observations, rewards and flags stay torch tensors on the simulator's device
    (float32, float32, bool) and actions are taken as tensors, so a policy on that GPU acts on
    the scene's own observations with no copy through the host per step.
    """

    def __init__(self, env: Any, key: str | None = None) -> None:
        self.env, self.key = env, key  # key: the entry of a Dict observation that is kept
        self.num_envs = int(env.num_envs)
        self.device = env.device
        self.tensor_device = torch.device(env.device)
        self.numpy = True
        self.single_observation_space = (
            env.single_observation_space if key is None else env.single_observation_space[key]
        )
        self.single_action_space = env.single_action_space
        self.observation_space = gym.vector.utils.batch_space(
            self.single_observation_space, self.num_envs
        )
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self.metadata = {
            **env.metadata,
            "autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP,
        }
        self.render_mode = getattr(env, "render_mode", None)
        self._ended = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict | None = None
    ) -> tuple[np.ndarray | torch.Tensor, dict]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._ended[:] = False
        return self._out(self._kept(obs).float()), self._out(info)

    def step(self, actions: np.ndarray | torch.Tensor) -> tuple:
        actions = torch.as_tensor(actions, dtype=torch.float32, device=self.device)
        obs, reward, terminated, truncated, info = self.env.step(actions)
        reward = torch.as_tensor(reward, device=self.device).clone()
        terminated = torch.as_tensor(terminated, device=self.device).clone()
        truncated = torch.as_tensor(truncated, device=self.device).clone()
        ended = self._ended
        if ended.any():
            # The whole scene stepped; the envs that had ended start anew from a reset instead.
            obs, _ = self.env.reset(options={"env_idx": ended.nonzero().flatten()})
            reward[ended] = 0.0
            terminated[ended] = False
            truncated[ended] = False
        self._ended = terminated | truncated
        return (
            self._out(self._kept(obs).float()),
            self._out(reward.float()),
            self._out(terminated.bool()),
            self._out(truncated.bool()),
            self._out(info),
        )

    def _out(self, x: Any) -> Any:
        return _numpy(x) if self.numpy else x

    def _kept(self, obs: Any) -> Any:
        return obs if self.key is None else obs[self.key]

    def close_extras(self, **kwargs: Any) -> None:
        self.env.close()


def _backend(sim_backend: str, gpu_available: bool) -> Literal["cpu", "gpu"]:
    """The simulator ``sim_backend`` names; ``auto`` is the GPU where CUDA is available."""
    if sim_backend == "auto":
        return "gpu" if gpu_available else "cpu"
    if sim_backend in _CPU_NAMES:
        return "cpu"
    if sim_backend in _GPU_NAMES or sim_backend.startswith("cuda:"):
        return "gpu"
    raise EnvError(f"env.id: ManiSkill sim_backend '{sim_backend}': use auto, cpu, gpu or cuda:N")


OBS_MODES = ("state", "state_dict", "rgb")


def _image_mode(task: str, kwargs: dict[str, Any]) -> bool:
    """Whether ``obs_mode`` asks for camera images (``rgb``); ``EnvError`` for the visual modes
    no rlcore policy reads."""
    mode = kwargs.get("obs_mode", "state")
    if mode not in OBS_MODES:
        raise EnvError(
            f"env.kwargs: obs_mode '{mode}' for 'maniskill/{task}': rlcore's policies read states "
            "(obs_mode state) or camera images (obs_mode rgb: the CNN; several cameras are "
            "stacked on the channel axis); depth and point clouds are not built"
        )
    return mode == "rgb"


def _rgb_only(env: gym.Env) -> gym.Env:
    """A batched ManiSkill env whose observation is its cameras' RGB images alone, ``[N, H, W,
    3 x cameras]`` uint8 (ManiSkill's ``FlattenRGBDObservationWrapper``), in a ``Dict`` under
    ``rgb``."""
    from mani_skill.utils.wrappers.flatten import FlattenRGBDObservationWrapper

    return FlattenRGBDObservationWrapper(env, rgb=True, depth=False, state=False)


class RGBObservation(gym.ObservationWrapper):
    """A CPU ManiSkill env's ``{"rgb": image}`` observation as the ``(H, W, C)`` uint8 image
    (the Nature CNN's input: rlcore scales it to [0, 1])."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.observation_space = env.observation_space["rgb"]

    def observation(self, observation: dict[str, Any]) -> np.ndarray:
        return observation["rgb"]


def _ms_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """ManiSkill's gym.make kwargs; no renderer unless something is rendered (faster)."""
    out = dict(kwargs)
    if out.get("obs_mode", "state") in ("state", "state_dict") and out.get("render_mode") is None:
        out.setdefault("render_backend", "none")
    return out


def _import_mani_skill(task: str) -> None:
    """Import ManiSkill and register its tasks with gymnasium; ``EnvError`` if not installed."""
    try:
        import mani_skill.envs  # noqa: F401  (registers the tasks)
    except ImportError as exc:
        raise EnvError(
            f"env.id: 'maniskill/{task}' needs ManiSkill, the 'maniskill' extra: "
            f"pip install -e '.[maniskill]' ({exc})"
        ) from None


def _vulkan_checked(task: str, make: Callable[[], gym.Env]) -> gym.Env:
    """``make()``, turning SAPIEN's Vulkan failures into an ``EnvError`` that says what to do."""
    try:
        return make()
    except RuntimeError as exc:
        text = str(exc)
        if "vk::" in text or "rendering device" in text or "Vulkan" in text:
            raise EnvError(
                f"env.id: 'maniskill/{task}': SAPIEN found no working Vulkan driver ({text}). "
                "Install one: Mesa >= 25 lavapipe on a CPU (.ci/install_vulkan.sh on Debian 12), "
                "the NVIDIA driver's Vulkan ICD on a GPU"
            ) from None
        raise


def _numpy(x: Any) -> Any:
    """Torch tensors (also in dicts, lists and tuples) as numpy arrays on the CPU."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    if isinstance(x, dict):
        return {k: _numpy(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_numpy(v) for v in x)
    return x


for _task in MANISKILL_TASKS:
    register_maniskill_task(_task)


def maniskill_arguments(spec_kwargs: dict[str, Any]) -> set[str] | None:
    """What ``env.kwargs`` may name for ``maniskill/<task>``: rlcore's own (``sim_backend``,
    ``ignore_terminations``) and the keywords of ManiSkill's task class down to ``BaseEnv``
    (obs_mode, control_mode, reward_mode, ...); None (any) where ManiSkill is not installed
    (making the env then says that it is needed)."""
    task = spec_kwargs["task"]
    try:
        _import_mani_skill(task)
    except EnvError:
        return None
    from mani_skill.utils.registration import REGISTERED_ENVS

    registered = REGISTERED_ENVS.get(task)
    names = None if registered is None else accepted_arguments(registered.cls, passed_on=True)
    if names is None:
        return None
    # ManiSkill's gym.make takes max_episode_steps; num_envs is rlcore's (env.num_envs)
    return (names - {"num_envs"}) | {"sim_backend", "ignore_terminations", "max_episode_steps"}


make_maniskill_env.env_arguments = maniskill_arguments  # (check_env_kwargs reads them)
make_maniskill_vector_env.env_arguments = maniskill_arguments
