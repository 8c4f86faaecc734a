"""A user's env module as gymnasium's docs write one: the env registered with
``gymnasium.register`` on import, made by ``gym.make("tests.envs.registered_envs:BitMatch-v0")``
(tests/envs/test_gymnasium.py)."""

import gymnasium as gym
import numpy as np

TARGET = np.array([1, 0, 1, 1], dtype=np.int8)


class BitMatch(gym.Env):
    """MultiBinary(4) actions; each step's reward is the number of bits that match ``TARGET``,
    episodes of 8 steps: a random policy returns 16 on average, the best one 32."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.MultiBinary(4)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        assert self.action_space.contains(np.asarray(action)), action
        self.t += 1
        matched = float((np.asarray(action) == TARGET).sum())
        return np.zeros(2, np.float32), matched, False, self.t >= 8, {}


gym.register("BitMatch-v0", entry_point=BitMatch)
