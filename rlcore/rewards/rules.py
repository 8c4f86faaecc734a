"""Whether a response's answer is right: each rule returns True/False, or None when the response
has no answer in the expected form (the reward worker turns these into scores); and the ways a
custom function is called (rlcore's, verl's, TRL's), checked when it is loaded.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlcore.data.answers import (
    extract_gsm8k_answer,
    last_number,
    math_reference,
    parse_number,
    quiet_math_verify,
)

# Answers are read from the end of a response; a runaway response is cut here first, which also
# bounds the regex work per response.
MAX_CHARS = 4000


def gsm8k_correct(response: str, answer: str, mode: str = "strict") -> bool | None:
    """GSM8K scoring, numeric: ``#### 72.``, ``#### 72`` and ``#### $72`` all equal ``72``.

    ``strict``: the number after the last ``####``; ``flexible``: the last number anywhere.

    >>> gsm8k_correct("3 * 24 = 72\\n#### $72.", "72")
    True
    >>> gsm8k_correct("#### 1,000", "1000")
    True
    >>> gsm8k_correct("it is 72", "72") is None  # strict needs '####'
    True
    >>> gsm8k_correct("it is 72", "72", mode="flexible")
    True
    """
    response = response[-MAX_CHARS:]
    written = extract_gsm8k_answer(response) if mode == "strict" else last_number(response)
    if written is None:
        return None
    got, want = parse_number(written), parse_number(answer)
    if got is None or want is None:
        return None if got is None else False
    return got == want


def math_correct(response: str, answer: str, timeout_s: int | None = None) -> bool | None:
    """``\\boxed{}`` (or any final expression) equivalence by math-verify: ``\\frac{1}{2}`` = 0.5.

    ``timeout_s``: math-verify's own limits on parsing and on verifying, which it implements
    with signal alarms and so only in a main thread (the scoring processes run this there; they
    are also killed past ``reward.rules.timeout_s``: scoring.py).
    """
    from math_verify import parse, verify

    quiet_math_verify()
    predicted = parse(response[-MAX_CHARS:], parsing_timeout=timeout_s)
    if not predicted:
        return None
    gold = list(_reference(answer, timeout_s))
    return bool(verify(gold, predicted, timeout_seconds=timeout_s))


@functools.lru_cache(maxsize=4096)
def _reference(answer: str, timeout_s: int | None) -> tuple[Any, ...]:
    # each reference answer read once per scoring process, not once per response
    return tuple(math_reference(answer, timeout_s))


def load_custom_fn(spec: str, answer_key: str = "answer") -> Callable[..., Any]:
    """``path/to/file.py:function`` -> the function, which must take one of the signatures
    rlcore calls (``call_problem``); errors name ``reward.rules.custom_fn``."""
    from rlcore.config.errors import ConfigError  # here: scoring processes start without it
    from rlcore.config.user_files import import_user_file

    path, sep, name = spec.rpartition(":")
    if not sep or not path or not name:
        raise ConfigError(f"reward.rules.custom_fn: '{spec}' is not 'path/to/file.py:function'")
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError(f"reward.rules.custom_fn: {path} does not exist")
    module = import_user_file(
        file, f"rlcore_user_reward_{file.stem}", "reward.rules.custom_fn", path
    )
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ConfigError(f"reward.rules.custom_fn: {path} defines no function '{name}'")
    problem = call_problem(fn, answer_key)
    if problem:
        raise ConfigError(f"reward.rules.custom_fn: {spec} {problem}")
    return fn


def call_problem(fn: Callable[..., Any], answer_key: str = "answer") -> str:
    """Why rlcore cannot call ``fn`` in any of its three ways ("" when it can): ``(response,
    answer)``; verl's ``compute_score(data_source, solution_str, ground_truth, extra_info)``;
    TRL's ``f(completions, **kwargs)`` (``trl_signature``)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # (a builtin without one: called as it comes)
        return ""
    given = trl_columns(answer_key)
    ways = (
        "rlcore calls f(response, answer), verl's compute_score(data_source, solution_str, "
        f"ground_truth, extra_info=None) or TRL's f(completions, **kwargs) (given "
        f"{', '.join(given)} as lists)"
    )
    if trl_signature(fn) is not None:
        required = [
            p.name
            for p in signature.parameters.values()
            if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        missing = [name for name in required if name not in given]
        return f"takes {', '.join(missing)}, which rlcore does not give: {ways}" if missing else ""
    if verl_signature(fn) is not None:
        return ""
    try:
        signature.bind("response", "answer")
    except TypeError:
        return f"takes {fn.__name__}{signature}: {ways}"
    return ""


@functools.lru_cache(maxsize=8)
def verl_signature(custom: Any) -> frozenset[str] | None:
    """The keywords to call ``custom`` with when it is written as verl's
    ``compute_score(data_source, solution_str, ground_truth, extra_info=None)`` (it is then
    called so, with each row's ``data_source`` and ``extra_info``, None where the data has
    none); None for a ``(response, answer)`` function. Read once per function."""
    try:
        parameters = inspect.signature(custom).parameters
    except (TypeError, ValueError):
        return None
    if "solution_str" not in parameters or "ground_truth" not in parameters:
        return None
    verl = ("data_source", "solution_str", "ground_truth", "extra_info")
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    return frozenset(k for k in verl if k in parameters or takes_any)


def trl_columns(answer_key: str = "answer") -> tuple[str, ...]:
    """The keywords a TRL-style function is given, each a list of one row's value."""
    return tuple(dict.fromkeys(("prompts", "completions", "answer", answer_key, *VERL_CONTEXT)))


VERL_CONTEXT = ("data_source", "extra_info")


@functools.lru_cache(maxsize=8)
def trl_signature(custom: Any) -> frozenset[str] | None:
    """The keywords (of ``trl_columns``) to call ``custom`` with when it is written as TRL's
    reward functions, ``f(completions, **kwargs) -> list[float]`` (batched: one value per
    completion); None for any other function. ``frozenset()`` with ``**kwargs``: all of them."""
    try:
        parameters = inspect.signature(custom).parameters
    except (TypeError, ValueError):
        return None
    if "completions" not in parameters or "solution_str" in parameters:
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return frozenset()
    return frozenset(parameters)
