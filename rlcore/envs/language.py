"""Language-conditioned observations as one float vector, so that they travel through the env
worker, the rollout buffer and checkpoints as every other observation does.

An env whose observation space is a ``Dict`` with an ``instruction`` (``gymnasium.spaces.Text``)
and a ``state`` (1-D ``Box``) entry, and optionally an ``image`` (``Box`` of shape
``(H, W, C)``, a camera's pixels), is wrapped by ``TextObservation``: its observations become
``[max_length + H*W*C + D]`` floats, the instruction's characters as their index in the ``Text``
space's character set plus one (0 pads), then the image's pixels (row-major, as the env gives
them), then the state. The policy reads the text and the image back (``decode_instructions``,
``TextStateBox.image_shape``); the space says where each part ends (``TextStateBox``).
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rlcore.envs.registry import EnvError


class TextStateBox(spaces.Box):
    """The wrapped observation space: a float ``Box`` whose first ``text_length`` entries are
    an instruction's character codes over ``charset`` (1-based, 0 pads), then an image's
    ``image_shape`` pixels flattened (None: no image), then the state."""

    def __init__(
        self, text_length: int, charset: str, state: spaces.Box, image: spaces.Box | None = None
    ) -> None:
        parts_low = [np.zeros(text_length)]
        parts_high = [np.full(text_length, len(charset))]
        if image is not None:
            parts_low.append(np.broadcast_to(image.low, image.shape).ravel())
            parts_high.append(np.broadcast_to(image.high, image.shape).ravel())
        low = np.concatenate([*parts_low, np.broadcast_to(state.low, state.shape)])
        high = np.concatenate([*parts_high, np.broadcast_to(state.high, state.shape)])
        super().__init__(low.astype(np.float32), high.astype(np.float32), dtype=np.float32)
        self.text_length, self.charset = text_length, charset
        self.image_shape = None if image is None else tuple(int(n) for n in image.shape)


def language_problem(space: Any) -> str | None:
    """What keeps a ``Dict`` observation space from the contract (None when it keeps it): an
    ``instruction`` Text and a 1-D ``state`` Box entry, optionally an ``image`` Box of shape
    ``(H, W, C)`` with 1 or 3 channels, nothing else."""
    extra = sorted(set(space.spaces) - {"instruction", "state", "image"})
    if extra:
        return (
            f"a Dict observation space with {extra}: rlcore's language policies read an "
            "'instruction' (Text), a 'state' (1-D Box) and optionally an 'image' (H, W, C Box) "
            "entry"
        )
    text, state = space.spaces.get("instruction"), space.spaces.get("state")
    if not (
        isinstance(text, spaces.Text) and isinstance(state, spaces.Box) and len(state.shape) == 1
    ):
        return (
            "a Dict observation space needs an 'instruction' Text entry and a 'state' 1-D Box entry"
        )
    image = space.spaces.get("image")
    if image is not None and not (
        isinstance(image, spaces.Box)
        and len(image.shape) == 3
        and image.shape[2] in (1, 3)
        and image.dtype == np.uint8
    ):
        return (
            f"an 'image' entry {image}: rlcore reads a camera image as a uint8 Box of shape "
            "(height, width, channels) with 1 or 3 channels"
        )
    return None


class TextObservation(gym.ObservationWrapper):
    """See the module docstring."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        text, image = space["instruction"], space.spaces.get("image")
        self.charset = "".join(text.character_list)
        self.observation_space = TextStateBox(text.max_length, self.charset, space["state"], image)
        name = env.spec.id if env.spec is not None else type(env.unwrapped).__name__
        self.source = f"env {name}'s observation"

    def observation(self, observation: dict[str, Any]) -> np.ndarray:
        space = self.observation_space
        sizes = (int(np.prod(space.image_shape)) if space.image_shape else 0, self.state_size)
        return flatten_language(observation, space.text_length, space.charset, sizes, self.source)

    @functools.cached_property
    def state_size(self) -> int:
        return int(np.prod(self.env.observation_space["state"].shape))


def flatten_language(
    observation: dict[str, Any],
    text_length: int,
    charset: str,
    sizes: tuple[int, int] | None = None,
    source: str = "the observation",
) -> np.ndarray:
    """One ``Dict`` observation, or a vector env's batch of them (a sequence of instructions),
    as the float vector(s) ``TextStateBox`` describes (see the module docstring). ``sizes``:
    the image's and the state's number of values, checked when given; ``source`` names the
    observation in the ``EnvError`` that says what in it does not fit."""
    missing = sorted({"instruction", "state"} - set(observation))
    if missing:
        raise EnvError(
            f"{source} has no {missing[0]!r} entry; give a Dict observation with "
            "'instruction' (a string) and 'state' (and 'image' where the env has one)"
        )
    text = observation["instruction"]
    single = isinstance(text, str)
    texts = [text] if single else list(text)
    index = _codes(charset)
    codes = np.zeros((len(texts), text_length), dtype=np.float32)
    for row, instruction in enumerate(texts):
        _check_instruction(instruction, text_length, index, source)
        codes[row, : len(instruction)] = [index[c] for c in instruction]
    parts = [codes]
    names = ("image", "state") if "image" in observation else ("state",)
    for name in names:
        values = np.asarray(observation[name], np.float32)
        if sizes is not None:
            size = sizes[0] if name == "image" else sizes[1]
            if values.size != size * len(texts):
                raise EnvError(
                    f"{source}: its '{name}' holds {values.size // len(texts)} values per "
                    f"observation (shape {values.shape}), its space {size}; give "
                    f"the '{name}' the space's shape"
                )
        parts.append(values.reshape(len(texts), -1))
    flat = np.concatenate(parts, axis=1)
    return flat[0] if single else flat


def _check_instruction(text: Any, text_length: int, index: dict[str, int], source: str) -> None:
    """``EnvError`` naming what keeps ``text`` from the ``Text`` space: not a string, longer
    than its ``max_length``, or a character outside its character set."""
    if not isinstance(text, str):
        raise EnvError(f"{source}: its instruction is a {type(text).__name__}, not a string")
    if len(text) > text_length:
        raise EnvError(
            f"{source}: its instruction has {len(text)} characters ({text[:40]!r}...), its Text "
            f"space's max_length is {text_length}; shorten it, or raise the space's max_length"
        )
    outside = sorted({c for c in text if c not in index})
    if outside:
        shown = "".join(list(index)[:40])
        raise EnvError(
            f"{source}: its instruction {text!r} holds {''.join(outside)!r}, outside its Text "
            f"space's character set ({shown!r}{'...' if len(index) > 40 else ''}); add them "
            "to the space's charset, or leave them out of the instruction"
        )


@functools.cache
def _codes(charset: str) -> dict[str, int]:
    """Each character's code in ``charset`` (1-based; 0 pads), worked out once per set: every
    step of every env reads it."""
    return {c: i + 1 for i, c in enumerate(charset)}


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
