"""A batched torch env in the shape of ManiSkill's GPU scene (``ManiSkillVectorEnv`` with
``auto_reset=False``: torch tensors on a device, partial resets by ``options["env_idx"]``), on the
CPU so the tensor-env path runs in CI. Registered as two gymnasium ids: ``rlcore_test/Drift-v0``
is a tensor env (``NextStepVectorEnv``), ``rlcore_test/DriftNumpy-v0`` the same env hiding its
device, which rlcore then steps in numpy. The two must train identically.

Each env is a point on a line with a velocity: obs ``[position, velocity]``; a Box action in
[-1, 1] accelerates it; the reward is ``1 - |position|``; leaving [-2, 2] terminates, 12 steps
truncate.
"""

from typing import ClassVar

import gymnasium as gym
import numpy as np
import torch

from rlcore.envs.maniskill import NextStepVectorEnv


class Drift:
    single_observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    single_action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    metadata: ClassVar[dict] = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def __init__(self, num_envs: int) -> None:
        self.num_envs, self.device = num_envs, torch.device("cpu")
        self.state = torch.zeros(num_envs, 2)
        self.steps = torch.zeros(num_envs, dtype=torch.int64)
        self.generator = torch.Generator().manual_seed(0)

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.generator.manual_seed(int(seed))
        idx = torch.arange(self.num_envs) if options is None else options["env_idx"]
        start = torch.rand(len(idx), generator=self.generator) - 0.5
        self.state[idx] = torch.stack([start, torch.zeros_like(start)], -1)
        self.steps[idx] = 0
        self.last_obs = self.state.clone()
        return self.last_obs, {}

    def step(self, actions):
        push = actions[:, 0].clamp(-1, 1)
        self.state[:, 1] = 0.9 * self.state[:, 1] + 0.1 * push
        self.state[:, 0] += self.state[:, 1]
        self.steps += 1
        reward = 1.0 - self.state[:, 0].abs()
        terminated = self.state[:, 0].abs() > 2.0
        truncated = ~terminated & (self.steps >= 12)
        self.last_obs = self.state.clone()
        return self.last_obs, reward, terminated, truncated, {}

    def close(self) -> None:
        pass


class NumpyOnly(NextStepVectorEnv):
    """The same env as a plain numpy vector env: no tensor device to step it on."""

    def __init__(self, env) -> None:
        super().__init__(env)
        self.tensor_device = None


def make_drift(num_envs: int, **kwargs) -> NextStepVectorEnv:
    return NextStepVectorEnv(Drift(num_envs))


def make_drift_numpy(num_envs: int, **kwargs) -> NextStepVectorEnv:
    return NumpyOnly(Drift(num_envs))


def _single(**kwargs):
    raise NotImplementedError("Drift is a batched env only: use env.vector_mode native")


for _id, _vector in (
    ("rlcore_test/Drift-v0", "make_drift"),
    ("rlcore_test/DriftNumpy-v0", "make_drift_numpy"),
):
    if _id not in gym.registry:
        gym.register(
            _id,
            entry_point=_single,
            vector_entry_point=f"{__name__}:{_vector}",
            disable_env_checker=True,
        )
