"""Envs whose discrete actions do not start at 0 (gymnasium's ``start``): a step with an action
outside the space raises, so a policy index sent as it is fails the run."""

import gymnasium as gym
import numpy as np


class _Checked(gym.Env):
    def __init__(self, action_space):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = action_space
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        if not self.action_space.contains(np.asarray(action, dtype=self.action_space.dtype)):
            raise ValueError(f"action {action!r} is outside {self.action_space}")
        self.t += 1
        reward = float(np.sum(action == self.action_space.start))  # the first action pays
        return np.full(2, self.t / 8, np.float32), reward, self.t >= 8, False, {}


def StartDiscrete(**_):
    return _Checked(gym.spaces.Discrete(3, start=-1))


def StartMultiDiscrete(**_):
    return _Checked(gym.spaces.MultiDiscrete([2, 3], start=[-2, 5]))


class Endless(gym.Env):
    """An episode that never ends (no termination, no time limit)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, **_):
        pass

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 1.0, False, False, {}
