"""The synthetic arithmetic task that ships with rlcore: the default reasoning job needs no
download. Problems are GSM8K-shaped rows (``question``, ``answer`` ending in ``#### N``) so the
same reader and scorer serve both.
"""

from __future__ import annotations

import random

from rlcore.config.errors import ConfigError

OPERATIONS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


QUESTION = "What is {expression}?"


def expression_of(question: str) -> str:
    """The arithmetic in one of these questions (``"12 + 7"`` of ``"What is 12 + 7?"``)."""
    head, tail = QUESTION.split("{expression}")
    return question.removeprefix(head).removesuffix(tail)


def arithmetic_problems(
    count: int, *, digits: int, operations: list[str], seed: int, exclude: set[str] | None = None
) -> list[dict[str, str]]:
    """``count`` distinct problems ``{"question": "What is 12 + 7?", "answer": "#### 19"}``.

    Operands have 1 to ``digits`` digits (uniform over the numbers, so most have ``digits``).
    The same arguments give the same list; ``exclude`` holds questions to leave out (the training
    set's, when drawing a validation set).
    """
    unknown = [op for op in operations if op not in OPERATIONS]
    if unknown or not operations:
        raise ConfigError(f"data.synthetic.operations: {unknown or operations} — use + - *")
    if not 1 <= digits <= 6:
        raise ConfigError(f"data.synthetic.digits: {digits} must be between 1 and 6")
    space = len(operations) * 10 ** (2 * digits)
    taken = set(exclude or ())
    if count + len(taken) > space:
        raise ConfigError(
            f"data.synthetic: {count} distinct problems asked for, but {digits}-digit operands "
            f"with {operations} give only {space}; use more digits or fewer problems"
        )
    rng = random.Random(seed)
    rows = []
    while len(rows) < count:
        a, b = rng.randrange(10**digits), rng.randrange(10**digits)
        op = rng.choice(operations)
        question = QUESTION.format(expression=f"{a} {op} {b}")
        if question in taken:
            continue
        taken.add(question)
        rows.append({"question": question, "answer": f"#### {OPERATIONS[op](a, b)}"})
    return rows
