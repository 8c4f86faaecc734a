"""``color_reach``: a language-conditioned 2-D reach, the shipped task for language-model
policies (``actor.model.type: lm``).

A point agent and ``targets`` coloured targets lie on the square [-1, 1]^2; the instruction
names one of them ("reach the blue target"). The episode ends when the agent touches any target
(a success only if it is the named one) or after ``max_steps`` steps. The state lists the
agent's position, then every target's in a fixed colour order, so the state alone does not say
which target is wanted: a policy that ignores the instruction succeeds in at most about
1/``targets`` of the episodes.

Observations follow the env contract for language policies (docs/embodied.md): a
``gymnasium.spaces.Dict`` with an ``instruction`` (``Text``) and a ``state`` (``Box``) entry.
Rewards (``reward``): ``dense``, the distance gained towards the named target each step and 1 on
success; ``sparse``, 1 on success only (an outcome for group baselines: touching the wrong
target is then no better than wandering). ``info`` carries ``is_success``
(gymnasium-robotics' name) at every step.
"""

from __future__ import annotations

import string
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rlcore.envs.registry import register_env

COLOURS = ("red", "green", "blue", "yellow", "purple", "orange")
CHARSET = string.ascii_lowercase + " "
MOVES = np.array([[0.0, 1.0], [0.0, -1.0], [-1.0, 0.0], [1.0, 0.0]], dtype=np.float32)


class ColorReach(gym.Env):
    """See the module docstring. ``continuous``: ``Box(-1, 1, (2,))`` velocity actions (scaled
    by ``step_size``) instead of ``Discrete(4)`` moves (up, down, left, right)."""

    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(
        self,
        targets: int = 3,
        continuous: bool = False,
        max_steps: int = 30,
        step_size: float = 0.15,
        radius: float = 0.2,
        reward: str = "dense",
    ) -> None:
        if reward not in ("dense", "sparse"):
            raise ValueError(f"reward: {reward!r}; dense or sparse")
        self.sparse = reward == "sparse"
        if not 2 <= targets <= len(COLOURS):
            raise ValueError(f"targets: {targets}; between 2 and {len(COLOURS)}")
        self.targets, self.max_steps = targets, max_steps
        self.step_size, self.radius = step_size, radius
        self.observation_space = spaces.Dict(
            {
                "instruction": spaces.Text(max_length=32, min_length=1, charset=CHARSET),
                "state": spaces.Box(-1.0, 1.0, (2 + 2 * targets,), np.float32),
            }
        )
        self.action_space = (
            spaces.Box(-1.0, 1.0, (2,), np.float32) if continuous else spaces.Discrete(4)
        )
        self.continuous = continuous

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        super().reset(seed=seed)
        rng = self.np_random
        self.goal = int(rng.integers(self.targets))
        self.agent = rng.uniform(-0.3, 0.3, 2).astype(np.float32)
        placed: list[np.ndarray] = []
        while len(placed) < self.targets:  # apart from the agent and from each other
            point = rng.uniform(-0.9, 0.9, 2).astype(np.float32)
            near = [np.linalg.norm(point - p) < 3 * self.radius for p in placed]
            if np.linalg.norm(point - self.agent) > 0.5 and not any(near):
                placed.append(point)
        self.spots = np.stack(placed)
        self.steps = 0
        return self._observation(), {"is_success": False}

    def step(self, action: Any) -> tuple:
        before = self._distance()
        if self.continuous:
            move = np.clip(np.asarray(action, dtype=np.float32), -1.0, 1.0)
        else:
            move = MOVES[int(action)]
        self.agent = np.clip(self.agent + self.step_size * move, -1.0, 1.0).astype(np.float32)
        self.steps += 1
        touched = np.flatnonzero(np.linalg.norm(self.spots - self.agent, axis=1) < self.radius)
        success = self.goal in touched
        gained = 0.0 if self.sparse else float(before - self._distance())
        reward = gained + (1.0 if success else 0.0)
        terminated = len(touched) > 0
        truncated = not terminated and self.steps >= self.max_steps
        return self._observation(), reward, terminated, truncated, {"is_success": success}

    def _distance(self) -> float:
        return float(np.linalg.norm(self.spots[self.goal] - self.agent))

    def _observation(self) -> dict[str, Any]:
        state = np.concatenate([self.agent, self.spots.ravel()]).astype(np.float32)
        return {"instruction": f"reach the {COLOURS[self.goal]} target", "state": state}


@register_env("color_reach")
def make_color_reach(**kwargs: Any) -> ColorReach:
    return ColorReach(**kwargs)
