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
With ``image_size`` > 0 the targets are seen, not listed: an ``image`` entry (``image_size`` x
``image_size`` RGB, uint8) draws each target as a disc of its colour and the agent as a white
dot on black, and the state holds the agent's position alone, so a policy must read the
instruction *and* the image.
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
RGB = np.array(
    [[255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 255, 0], [160, 0, 255], [255, 128, 0]],
    dtype=np.uint8,
)
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
        image_size: int = 0,
    ) -> None:
        if reward not in ("dense", "sparse"):
            raise ValueError(f"reward: {reward!r}; dense or sparse")
        self.sparse = reward == "sparse"
        if not 2 <= targets <= len(COLOURS):
            raise ValueError(f"targets: {targets}; between 2 and {len(COLOURS)}")
        self.targets, self.max_steps = targets, max_steps
        self.step_size, self.radius = step_size, radius
        if image_size < 0 or 0 < image_size < 8:
            raise ValueError(f"image_size: {image_size}; 0 (no image) or at least 8 pixels")
        self.image_size = image_size
        entries = {
            "instruction": spaces.Text(max_length=32, min_length=1, charset=CHARSET),
            "state": spaces.Box(-1.0, 1.0, (2 if image_size else 2 + 2 * targets,), np.float32),
        }
        if image_size:
            entries["image"] = spaces.Box(0, 255, (image_size, image_size, 3), np.uint8)
        self.observation_space = spaces.Dict(entries)
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
        instruction = f"reach the {COLOURS[self.goal]} target"
        if self.image_size:
            return {"instruction": instruction, "state": self.agent.copy(), "image": self._image()}
        state = np.concatenate([self.agent, self.spots.ravel()]).astype(np.float32)
        return {"instruction": instruction, "state": state}

    def _image(self) -> np.ndarray:
        """The square [-1, 1]^2 seen from above, row 0 at y = 1: each target a disc of its
        colour and of the touching radius, the agent a white dot on top."""
        size = self.image_size
        centres = (np.arange(size) + 0.5) / size * 2.0 - 1.0
        x, y = np.meshgrid(centres, centres[::-1])
        image = np.zeros((size, size, 3), dtype=np.uint8)
        for colour, (tx, ty) in zip(RGB, self.spots, strict=False):
            image[(x - tx) ** 2 + (y - ty) ** 2 < self.radius**2] = colour
        dot = max(self.radius / 2, 1.5 / size)
        image[(x - self.agent[0]) ** 2 + (y - self.agent[1]) ** 2 < dot**2] = 255
        return image


@register_env("color_reach")
def make_color_reach(**kwargs: Any) -> ColorReach:
    return ColorReach(**kwargs)
