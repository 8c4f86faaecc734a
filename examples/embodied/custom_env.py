"""Your own environment, trained by config alone: no change to rlcore, no registration.

    python examples/embodied/main.py env.id=custom_env:PointReach env.vector_mode=sync \
        runner.total_env_steps=50000

``env.id`` names ``module.path:ClassName``; any importable gymnasium.Env class works (here the
module sits next to main.py, which Python puts on its path). To use a short name instead,
decorate a factory with ``rlcore.envs.register_env("point_reach")`` in a module you import.

The rest is the default job's (embodied/cartpole_ppo, the design card's shared trunk): over seeds
1-6 it ends at -3.9 to -5.0 (median -4.7) on one machine, -3.9 to -5.5 (median -4.8) on another,
a trunk per head (``actor.model.shared_backbone=false``) at -3.9 to -5.1 (median -4.6). The env
declares no reward threshold, so the run trains all 50k steps; ``env.solved_threshold=-8`` would
end it at the first eval past -8 (the default job's ``runner.stop_at_threshold``).
"""

import gymnasium as gym
import numpy as np


class PointReach(gym.Env):
    """Move a point on a line to a random target: reward -|position - target| per step.

    Observation: [position, target] in [-1, 1]. Action: a velocity in [-0.1, 0.1].
    Episodes last 50 steps (a time limit, so the runner bootstraps their last value).
    Staying put scores about -33; the command above reaches about -5 in 50k steps (3-4 s here).
    """

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(-0.1, 0.1, (1,), np.float32)

    def __init__(self, horizon: int = 50):
        self.horizon = horizon

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position, self.target = self.np_random.uniform(-1.0, 1.0, size=2)
        self.steps = 0
        return self._obs(), {}

    def step(self, action):
        self.position = float(np.clip(self.position + float(action[0]), -1.0, 1.0))
        self.steps += 1
        reward = -abs(self.position - self.target)
        return self._obs(), reward, False, self.steps >= self.horizon, {}

    def _obs(self):
        return np.array([self.position, self.target], np.float32)
