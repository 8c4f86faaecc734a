"""Hand-made envs whose returns can be worked out by hand (used through 'module:Class')."""

import threading
import warnings

import gymnasium as gym
import numpy as np


class Corridor(gym.Env):
    """Walk right along a corridor: obs = [position], reward 1 per step.

    Reaching ``goal`` terminates the episode; ``limit`` steps truncate it (a time limit).
    Action 1 moves right, action 0 stays.
    """

    observation_space = gym.spaces.Box(-1.0, 100.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, goal: int = 100, limit: int = 3):
        self.goal, self.limit = goal, limit

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position, self.steps = 0, 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.position += int(action)
        self.steps += 1
        terminated = self.position >= self.goal
        truncated = not terminated and self.steps >= self.limit
        return np.array([self.position], np.float32), 1.0, terminated, truncated, {}


class NanEnv(Corridor):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs * np.nan, reward, terminated, truncated, info


class NanReset(Corridor):
    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        return obs * np.nan, info


class Stuck(Corridor):
    """Its 5th call of step never returns (a simulator that hangs)."""

    def step(self, action):
        self.calls = getattr(self, "calls", 0) + 1
        if self.calls == 5:
            threading.Event().wait()
        return super().step(action)


class WrongShape(Corridor):
    """Declares (1,) observations, returns (2,) ones."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return np.append(obs, 0.0), reward, terminated, truncated, info


class WrongShapeReset(Corridor):
    """Declares (1,) observations, and its reset returns a (2,) one."""

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        return np.append(obs, 0.0), info


class Raises(Corridor):
    """Its 2nd step raises (a simulator error), after warning once."""

    def step(self, action):
        self.calls = getattr(self, "calls", 0) + 1
        if self.calls == 2:
            warnings.warn("corridor: about to fail", stacklevel=1)
            raise RuntimeError("corridor exploded")
        return super().step(action)


class DictObs(Corridor):
    observation_space = gym.spaces.Dict({"x": gym.spaces.Box(-1.0, 1.0, (1,))})


class Pixels(gym.Env):
    """A 40x40 RGB image whose brightness is the position; same dynamics as Corridor."""

    side = 40
    observation_space = gym.spaces.Box(0, 255, (side, side, 3), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, limit: int = 4):
        self.limit = limit

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position, self.steps = 0, 0
        return self._image(), {}

    def step(self, action):
        self.position += int(action)
        self.steps += 1
        return self._image(), float(action), False, self.steps >= self.limit, {}

    def _image(self):
        return np.full((self.side, self.side, 3), min(255, 60 * self.position), np.uint8)


class SmallPixels(Pixels):
    """20x20 images: too small for the CNN policy's convolutions."""

    side = 20
    observation_space = gym.spaces.Box(0, 255, (side, side, 3), np.uint8)


class LockedCartPole(gym.Wrapper):
    """CartPole holding a lock, which no pickler can save (like a simulator's native handle)."""

    def __init__(self) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.lock = threading.Lock()
