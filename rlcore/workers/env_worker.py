"""Environments in their own processes: ``EnvWorker`` steps a vector env where the plan puts the
``env`` component, and ``RemoteVectorEnv`` lets a rollout rank step it through Ray as if it were
local (one round trip per step).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import ray
from ray import cloudpickle

from rlcore.envs import make_vector_env


class EnvWorker:
    """The ``env`` component: a vector env of ``num_envs`` copies of ``env_id``."""

    def __init__(self, ctx: Any, env_id: str, num_envs: int, mode: str) -> None:
        self.envs = make_vector_env(env_id, num_envs, mode)

    def spaces(self):
        return self.envs.single_observation_space, self.envs.single_action_space

    def reset(self, seed: int):
        return self.envs.reset(seed=seed)

    def step(self, actions):
        return self.envs.step(actions)

    def close(self) -> None:
        self.envs.close()

    # checkpoints: the envs themselves, pickled where they live

    def check_saveable(self, env_id: str) -> None:
        from rlcore.runners.checkpoint import check_envs_can_be_saved

        check_envs_can_be_saved(self.envs, env_id)

    def save(self, path: str) -> None:
        Path(path).write_bytes(cloudpickle.dumps(self.envs))

    def load(self, path: str) -> None:
        self.envs.close()
        self.envs = cloudpickle.loads(Path(path).read_bytes())


class RemoteVectorEnv:
    """The vector-env calls ``EmbodiedRunner`` makes, forwarded to an ``EnvWorker`` process."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.single_observation_space, self.single_action_space = self._call("spaces")

    def _call(self, method: str, *args: Any) -> Any:
        return ray.get(self.handle.call.remote("env", method, args, {}))

    def reset(self, seed: int):
        obs, info = self._call("reset", seed)
        return np.array(obs), info  # Ray returns read-only arrays; torch wants to own them

    def step(self, actions):
        obs, reward, terminated, truncated, info = self._call("step", actions)
        copies = (np.array(x) for x in (obs, reward, terminated, truncated))
        return (*copies, info)

    def close(self) -> None:
        self._call("close")

    def check_saveable(self, env_id: str) -> None:
        self._call("check_saveable", env_id)

    def save(self, path: str) -> None:
        self._call("save", path)

    def load(self, path: str) -> None:
        self._call("load", path)
