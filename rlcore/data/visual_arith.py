"""The synthetic visual arithmetic task (``data.synthetic.images``): two one-digit numbers drawn
side by side into a small image, the question naming only the operation ("What is the sum of the
two numbers in the image?"), so the answer is in the image alone. Rows are GSM8K-shaped as the
text task's (``question``, ``answer`` ending in ``#### N``) with the image beside them.

Each digit is a 3x5 glyph scaled to 6x10 pixels, white on black, placed at a random offset
within its half of a ``SIDE``-pixel square (2 pixels of horizontal, 6 of vertical play): the same
two numbers make many images, and a model must read the glyphs wherever they sit.
"""

from __future__ import annotations

import random

import numpy as np

from rlcore.config.errors import ConfigError
from rlcore.data.images import MARKER

SIDE = 16  # the image's side in pixels
SCALE = 2  # a glyph pixel is SCALE x SCALE image pixels
GLYPHS = {  # 3 columns x 5 rows, "#" lit
    0: ("###", "#.#", "#.#", "#.#", "###"),
    1: (".#.", "##.", ".#.", ".#.", "###"),
    2: ("###", "..#", "###", "#..", "###"),
    3: ("###", "..#", "###", "..#", "###"),
    4: ("#.#", "#.#", "###", "..#", "..#"),
    5: ("###", "#..", "###", "..#", "###"),
    6: ("###", "#..", "###", "#.#", "###"),
    7: ("###", "..#", "..#", "..#", "..#"),
    8: ("###", "#.#", "###", "#.#", "###"),
    9: ("###", "#.#", "###", "..#", "###"),
}
QUESTIONS = {
    "+": "What is the sum of the two numbers in the image?",
    "-": "What is the left number minus the right number in the image?",
    "*": "What is the product of the two numbers in the image?",
}
OPERATIONS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def glyph(digit: int) -> np.ndarray:
    """``[5 * SCALE, 3 * SCALE]`` uint8 (255 lit) of one digit."""
    rows = np.array([[c == "#" for c in row] for row in GLYPHS[digit]], dtype=np.uint8) * 255
    return np.kron(rows, np.ones((SCALE, SCALE), dtype=np.uint8))


def draw(left: int, right: int, offsets: tuple[int, int, int, int]) -> np.ndarray:
    """``[SIDE, SIDE, 3]`` uint8: ``left`` in the image's left half, ``right`` in its right,
    each glyph at its ``(x, y)`` offset within its half (``offsets``: left x, left y, right x,
    right y; x in 0..2, y in 0..SIDE - 10)."""
    image = np.zeros((SIDE, SIDE), dtype=np.uint8)
    for digit, x, y in (
        (left, offsets[0], offsets[1]),
        (right, SIDE // 2 + offsets[2], offsets[3]),
    ):
        g = glyph(digit)
        image[y : y + g.shape[0], x : x + g.shape[1]] = g
    return np.repeat(image[..., None], 3, axis=-1)


def visual_problems(
    count: int, *, operations: list[str], seed: int, exclude: set[tuple] | None = None
) -> list[dict]:
    """``count`` distinct problems ``{"question": "<image>What is the sum ...?", "answer":
    "#### 12", "image": [SIDE, SIDE, 3] uint8, "key": (a, op, b, offsets)}``; the same
    arguments give the same list; ``exclude`` holds keys to leave out (the training set's, when
    drawing a validation set)."""
    unknown = [op for op in operations if op not in OPERATIONS]
    if unknown or not operations:
        raise ConfigError(f"data.synthetic.operations: {unknown or operations} — use + - *")
    x_play, y_play = SIDE // 2 - 3 * SCALE, SIDE - 5 * SCALE
    space = len(operations) * 100 * ((x_play + 1) * (y_play + 1)) ** 2
    taken = set(exclude or ())
    if count + len(taken) > space:
        raise ConfigError(f"data.synthetic: {count} distinct image problems; at most {space}")
    rng = random.Random(seed)
    rows = []
    while len(rows) < count:
        a, b, op = rng.randrange(10), rng.randrange(10), rng.choice(operations)
        offsets = tuple(rng.randint(0, p) for p in (x_play, y_play, x_play, y_play))
        key = (a, op, b, offsets)
        if key in taken:
            continue
        taken.add(key)
        rows.append(
            {
                "question": MARKER + QUESTIONS[op],
                "answer": f"#### {OPERATIONS[op](a, b)}",
                "image": draw(a, b, offsets),
                "key": key,
            }
        )
    return rows
