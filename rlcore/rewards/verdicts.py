"""The rules' verdict on one response, and the loop of a scoring process (``scoring.py`` runs
it). (The generative judge, ``reward.kind: judge``, is ``judge.py``.)

This module imports neither torch nor the config package: a scoring process starts, and is
replaced after a timeout, in a fraction of a second.
"""

from __future__ import annotations

import math
import traceback
from dataclasses import dataclass
from typing import Any

from rlcore.data.answers import math_verify_seconds
from rlcore.procpool import Overtime, SoftDeadline, serve_items
from rlcore.rewards.rules import (
    gsm8k_correct,
    load_custom_fn,
    math_correct,
    trl_signature,
    verl_signature,
)

# A response is stopped in its scoring process at this share of reward.rules.timeout_s, so that the
# process goes on, before the pool kills and replaces it at the whole of it (procpool.py).
SOFT_SHARE = 0.8


class BadReward(Exception):
    """A custom reward that raised or returned something other than a finite number."""


@dataclass(frozen=True)
class Rules:
    """What judging reads of the ``reward`` section (plain values: no config import needed)."""

    kind: str
    gsm8k_mode: str
    correct_score: float
    format_score: float
    custom_fn: str | None
    timeout_s: float
    answer_key: str = "answer"  # data.answer_key: a TRL-style function's column of the answers

    @classmethod
    def of(cls, reward: Any, kind: str | None = None, answer_key: str = "answer") -> Rules:
        return cls(
            kind or reward.kind,
            reward.rules.gsm8k_mode,
            reward.rules.correct_score,
            reward.rules.format_score,
            reward.rules.custom_fn,
            reward.rules.timeout_s,
            answer_key,
        )


@dataclass(frozen=True)
class Verdict:
    score: float
    correct: bool | None  # None: no answer in the expected form, or no verdict (judged False)
    timed_out: bool = False
    judged: bool = True  # False: a custom function that returned a bare number (no verdict)
    # The reward's named parts (GDPO normalises each apart): the built-in kinds give "score",
    # "correct" (1 or 0) and "format" (1 when an answer in the expected form was found); a
    # custom function, every number in the dict it returns. None: a timed-out response (all 0).
    components: dict[str, float] | None = None


def _finite(number: int | float) -> bool:
    """Whether ``number`` is finite as a float (an int past 1.8e308 is not)."""
    try:
        return math.isfinite(number)
    except OverflowError:
        return False


def shown_value(value: Any) -> str:
    """``value`` as a one-line message shows it: its repr, cut past 40 characters."""
    try:
        text = repr(value)
    except ValueError:  # (an int past Python's 4300-digit conversion limit)
        return "an integer of over 4300 digits"
    return text if len(text) <= 40 else f"{text[:30]}... ({len(text)} characters)"


def _plain(value: Any) -> Any:
    """A numpy scalar or a 0-d array or tensor as the Python number (or bool) it holds."""
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        return value.item()
    return value


def _call_trl(custom: Any, names: frozenset[str], given: dict[str, Any], where: str) -> Any:
    """TRL's call on a batch of one row (each row is scored in a scoring process under its own
    deadline): every column a list of one value; the one value it returns."""
    kwargs = {k: [v] for k, v in given.items() if not names or k in names}
    returned = custom(**kwargs)
    if _plain(returned) is returned and hasattr(returned, "tolist"):  # (an array or a tensor)
        returned = returned.tolist()
    if not isinstance(returned, list | tuple) or len(returned) != 1:
        raise BadReward(
            f"{where} (TRL's signature: given lists of 1 row) returned "
            f"{shown_value(returned)}; return a list with one number per completion"
        )
    return returned[0]


def _call(
    custom: Any,
    response: str,
    answer: str,
    source: Any,
    extra: Any,
    prompt: str | None = None,
    answer_key: str = "answer",
    where: str = "",
) -> Any:
    trl = trl_signature(custom)
    if trl is not None:
        given = {
            "prompts": prompt,
            "completions": response,  # (a string: rlcore's prompts are TRL's standard format)
            "answer": answer,
            answer_key: answer,
            "data_source": source,
            "extra_info": extra,
        }
        return _call_trl(custom, trl, given, where)
    names = verl_signature(custom)
    if names is None:
        return custom(response, answer)
    given = {
        "data_source": source,
        "solution_str": response,
        "ground_truth": answer,
        "extra_info": extra,
    }
    return custom(**{k: v for k, v in given.items() if k in names})


def rule_verdict(
    rules: Rules,
    custom: Any,
    response: str,
    answer: str,
    index: int = 0,
    source: str | None = None,
    extra: Any = None,
    prompt: str | None = None,
) -> Verdict:
    """The verdict on one response (``custom``: the loaded custom function or None). A custom
    function takes ``(response, answer)``, or verl's ``(data_source, solution_str,
    ground_truth, extra_info)`` (``verl_signature``: then ``source`` and ``extra``, the row's
    ``data_source`` and ``extra_info``, are passed), or TRL's ``(completions, **kwargs)``
    (``trl_signature``: called on lists of this one row, ``prompt`` among them), and returns
    ``{"score": number, "correct": bool}`` (verl's ``"acc"`` is read as ``"correct"``), or a
    bare number: a reward with no verdict, which no accuracy counts (a score is never turned
    into a verdict by a threshold). Anything else is a ``BadReward``."""
    if custom is not None:
        where = f"reward.rules.custom_fn: {rules.custom_fn} on response {index}"
        try:
            returned = _call(
                custom, response, answer, source, extra, prompt, rules.answer_key, where
            )
        except BadReward:
            raise
        except (Exception, SystemExit) as error:  # sys.exit() in a reward is a bad reward too
            raise BadReward(f"{where} raised {type(error).__name__}: {error}") from None
        return _custom_verdict(returned, where)
    if rules.kind == "math":
        # math-verify's own limits too (signal alarms: whole seconds, main thread only)
        correct = math_correct(response, answer, timeout_s=math_verify_seconds(rules.timeout_s))
    else:
        correct = gsm8k_correct(response, answer, rules.gsm8k_mode)
    if correct is None:
        return Verdict(0.0, None, components={"score": 0.0, "correct": 0.0, "format": 0.0})
    score = rules.correct_score if correct else rules.format_score
    parts = {"score": score, "correct": float(correct), "format": 1.0}
    return Verdict(score, correct, components=parts)


def _custom_verdict(returned: Any, where: str) -> Verdict:
    """The verdict a custom function ``returned`` (``where``: the function and the response,
    as messages name them), or ``BadReward``."""
    verdict = None
    if isinstance(returned, dict):
        returned = {name: _plain(value) for name, value in returned.items()}
        verdict = returned.get("correct", returned.get("acc"))
        if verdict is not None and not isinstance(verdict, bool):
            raise BadReward(
                f"{where} returned correct={verdict!r}; the verdict is True or False (a "
                "number is a score: return it as another key)"
            )
    score = returned.get("score") if isinstance(returned, dict) else _plain(returned)
    if isinstance(score, bool) or not isinstance(score, int | float):
        raise BadReward(
            f"{where} returned {shown_value(returned)}; return a number, or "
            "{'score': number, 'correct': bool}"
        )
    if not _finite(score):
        raise BadReward(f"{where} returned {shown_value(score)}; rewards must be finite numbers")
    components = {"score": float(score)}
    if isinstance(returned, dict):
        for name, value in returned.items():
            if isinstance(value, int | float) and isinstance(name, str):  # bools too
                if not _finite(value):
                    raise BadReward(
                        f"{where} returned {name}={shown_value(value)}; the numbers it "
                        "returns must be finite"
                    )
                components[name] = float(value)
    if verdict is None:
        return Verdict(float(score), None, judged=False, components=components)
    return Verdict(float(score), verdict, components=components)


def serve(conn: Any, rules: Rules) -> None:
    """A scoring process (``rlcore.procpool``'s protocol): ``(index, response, answer[,
    data_source, extra_info])`` in, ``(index, Verdict)`` or ``(index, message)`` (a bad reward,
    a failure) out."""

    def setup() -> Any:
        custom = (
            load_custom_fn(rules.custom_fn, rules.answer_key) if rules.kind == "custom" else None
        )
        if rules.kind == "math":
            # math-verify loads its grammar and sympy on first use (seconds on a busy machine):
            # here, before "ready", so that no response's deadline pays for it
            math_correct(
                "\\boxed{\\frac{1}{2}}", "0.5", timeout_s=math_verify_seconds(rules.timeout_s)
            )
        return custom

    soft = SoftDeadline()

    def answer(custom: Any, index: int, item: tuple) -> Any:
        response, reference, *context = item  # (context: data_source, extra_info[, prompt])
        try:
            with soft.within(SOFT_SHARE * rules.timeout_s):
                return rule_verdict(rules, custom, response, reference, index, *context)
        except Overtime:  # stopped here, so this process goes on (no kill, no restart)
            return Verdict(0.0, False, timed_out=True)
        except BadReward as error:
            return str(error)
        except Exception as error:  # the rules themselves failing: say where
            detail = traceback.format_exc(limit=-3)
            return f"reward: scoring response {index} failed: {error}\n{detail}"

    serve_items(conn, setup, answer)
