"""ManiSkill's ``CPUGymWrapper`` as rlcore uses it: the stand-in task speaks plain gymnasium
already, so only ``ignore_terminations`` is left to apply."""

import gymnasium as gym


class CPUGymWrapper(gym.Wrapper):
    def __init__(self, env: gym.Env, ignore_terminations: bool = False) -> None:
        super().__init__(env)
        self.ignore_terminations = ignore_terminations

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated and not self.ignore_terminations, truncated, info
