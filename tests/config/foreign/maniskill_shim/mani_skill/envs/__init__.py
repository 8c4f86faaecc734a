"""Registers the stand-in ``PickCube-v1``: the gripper (3 of the 42 state numbers) moves by the
first 3 of the 8 actions towards a goal; the reward is ManiSkill's normalized_dense shape
(1 - tanh(5 x distance), in [0, 1]) and an episode ends in success within 5 cm."""

from typing import Any

import gymnasium as gym
import numpy as np

from mani_skill.utils.registration import REGISTERED_ENVS, Registered


class PickCubeStandIn(gym.Env):
    observation_space = gym.spaces.Box(-np.inf, np.inf, (42,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (8,), np.float32)

    def __init__(
        self,
        num_envs: int = 1,
        obs_mode: str = "state",
        control_mode: str = "pd_joint_delta_pos",
        reward_mode: str = "normalized_dense",
        sim_backend: str = "physx_cpu",
        sim_config: dict | None = None,
        render_backend: str = "none",
    ) -> None:
        assert num_envs == 1 and obs_mode == "state" and sim_backend == "physx_cpu"
        self.reward_mode = reward_mode
        self.pos = self.goal = np.zeros(3, np.float32)

    def _obs(self) -> np.ndarray:
        obs = np.zeros(42, np.float32)
        obs[:3], obs[3:6] = self.pos, self.goal
        return obs

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple:
        super().reset(seed=seed)
        self.pos = self.np_random.uniform(-0.2, 0.2, 3).astype(np.float32)
        self.goal = self.np_random.uniform(-0.2, 0.2, 3).astype(np.float32)
        return self._obs(), {}

    def step(self, action: np.ndarray) -> tuple:
        self.pos = self.pos + 0.05 * np.clip(action[:3], -1, 1).astype(np.float32)
        distance = float(np.linalg.norm(self.pos - self.goal))
        success = distance < 0.05
        dense = 1.0 - np.tanh(5 * distance)
        reward = float(success) if self.reward_mode == "sparse" else float(dense)
        return self._obs(), reward, success, False, {"success": success}


REGISTERED_ENVS["PickCube-v1"] = Registered(PickCubeStandIn)
if "PickCube-v1" not in gym.registry:
    gym.register("PickCube-v1", entry_point=PickCubeStandIn, disable_env_checker=True)
