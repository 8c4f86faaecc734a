"""Language-conditioned observations as one float vector, so that they travel through the env
worker, the rollout buffer and checkpoints as every other observation does.

An env whose observation space is a ``Dict`` with an ``instruction`` (``gymnasium.spaces.Text``)
and a ``state`` (1-D ``Box``) entry is wrapped by ``TextObservation``: its observations become
``[max_length + D]`` floats, the instruction's characters as their index in the ``Text`` space's
character set plus one (0 pads), then the state. The policy reads the text back
(``decode_instructions``); the space says where the text ends (``TextStateBox``).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class TextStateBox(spaces.Box):
    """The wrapped observation space: a float ``Box`` whose first ``text_length`` entries are
    an instruction's character codes over ``charset`` (1-based, 0 pads)."""

    def __init__(self, text_length: int, charset: str, state: spaces.Box) -> None:
        low = np.concatenate([np.zeros(text_length), np.broadcast_to(state.low, state.shape)])
        high = np.concatenate(
            [np.full(text_length, len(charset)), np.broadcast_to(state.high, state.shape)]
        )
        super().__init__(low.astype(np.float32), high.astype(np.float32), dtype=np.float32)
        self.text_length, self.charset = text_length, charset


def language_problem(space: Any) -> str | None:
    """What keeps a ``Dict`` observation space from the contract (None when it keeps it): an
    ``instruction`` Text and a 1-D ``state`` Box entry, nothing else."""
    extra = sorted(set(space.spaces) - {"instruction", "state"})
    if extra:
        return (
            f"a Dict observation space with {extra}: rlcore's language policies read an "
            "'instruction' (Text) and a 'state' (1-D Box) entry (image entries are not built yet)"
        )
    text, state = space.spaces.get("instruction"), space.spaces.get("state")
    if not (
        isinstance(text, spaces.Text) and isinstance(state, spaces.Box) and len(state.shape) == 1
    ):
        return (
            "a Dict observation space needs an 'instruction' Text entry and a 'state' 1-D Box entry"
        )
    return None


class TextObservation(gym.ObservationWrapper):
    """See the module docstring."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        text, state = env.observation_space["instruction"], env.observation_space["state"]
        self.charset = "".join(text.character_list)
        self.index = {c: i + 1 for i, c in enumerate(self.charset)}
        self.observation_space = TextStateBox(text.max_length, self.charset, state)

    def observation(self, observation: dict[str, Any]) -> np.ndarray:
        text = observation["instruction"]
        codes = np.zeros(self.observation_space.text_length, dtype=np.float32)
        codes[: len(text)] = [self.index[c] for c in text]
        return np.concatenate([codes, np.asarray(observation["state"], dtype=np.float32)])


def text_observations(env: gym.Env) -> gym.Env:
    """``env`` wrapped by ``TextObservation`` when it observes an instruction and a state;
    unchanged otherwise (a ``Dict`` space that breaks the contract is left for the space check
    to name)."""
    if (
        isinstance(env.observation_space, spaces.Dict)
        and language_problem(env.observation_space) is None
    ):
        return TextObservation(env)
    return env


def decode_instructions(codes: np.ndarray, charset: str) -> list[str]:
    """``[B, text_length]`` character codes (as ``TextObservation`` writes them) -> the texts."""
    table = np.array(["", *charset], dtype=object)
    rounded = np.rint(np.asarray(codes)).astype(np.int64)
    return ["".join(table[row[row > 0]]) for row in rounded]
