"""Numbers in answers: GSM8K's ``#### N`` convention, compared as numbers, not strings.

``parse_number("1,000") == parse_number("1000.")`` and ``parse_number("$72") == Decimal(72)``: a
reference answer and a model's answer match when they are the same number, however written.
"""

from __future__ import annotations

import logging
import math
import re
from decimal import Decimal, InvalidOperation
from typing import Any

# A number as people write it: optional sign and currency, digits with thousands commas, an
# optional decimal part, and a trailing period (end of sentence). No nested quantifiers: linear.
NUMBER = r"-?\$?\s?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?\.?|-?\$?\s?\.\d+"
_NUMBER_RE = re.compile(NUMBER)
_STRICT_RE = re.compile(r"####\s*(" + NUMBER + r")")


def parse_number(text: str) -> Decimal | None:
    """The number ``text`` spells (``"$1,000."`` -> 1000), or None when it is not one."""
    cleaned = text.strip().replace(",", "").replace("$", "").replace(" ", "").rstrip(".")
    if not cleaned or cleaned in ("-", "."):
        return None
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


def extract_gsm8k_answer(text: str) -> str | None:
    """The number after the last ``####`` in ``text`` as written, or None when there is none.

    >>> extract_gsm8k_answer("She pays 3 * 24 = 72 dollars.\\n#### 72")
    '72'
    >>> extract_gsm8k_answer("#### 1,000.")
    '1,000.'
    """
    matches = _STRICT_RE.findall(text)
    return matches[-1].strip() if matches else None


def last_number(text: str) -> str | None:
    """The last number written anywhere in ``text`` (GSM8K's flexible extraction)."""
    matches = _NUMBER_RE.findall(text)
    return matches[-1].strip() if matches else None


def math_verify_seconds(timeout_s: float) -> int:
    """``reward.rules.timeout_s`` as math-verify's own limits take it: signal alarms of whole
    seconds, at least one."""
    return max(1, math.ceil(timeout_s))


class _NoTimeoutNotice(logging.Filter):
    """Drops math-verify's "Timeout is disabled as ... is None or <= 0" notice, which it logs
    once per process at its first call without a limit of its own: rlcore bounds those calls
    itself (the scoring processes are killed past reward.rules.timeout_s; the grammar's first
    load has none on purpose), so on every MATH run it told the user of nothing to do."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Timeout is disabled")


_NO_TIMEOUT_NOTICE = _NoTimeoutNotice()


def quiet_math_verify() -> None:
    """Silence math-verify's timeout notice (only it: its other warnings pass) on its loggers."""
    for name in ("math_verify.parser", "math_verify.grader"):
        found = logging.getLogger(name)
        if _NO_TIMEOUT_NOTICE not in found.filters:
            found.addFilter(_NO_TIMEOUT_NOTICE)


def math_reference(answer: str, timeout_s: int | None) -> list[Any]:
    """A reference answer as math-verify reads it (its ``parse``: ``[]`` when it cannot, or
    when parsing takes over ``timeout_s`` whole seconds, a signal alarm that only a main thread
    can set; None: no limit). A bare answer is read as LaTeX math (``$...$``)."""
    from math_verify import parse

    quiet_math_verify()

    text = answer if "\\boxed" in answer or "$" in answer else f"${answer}$"
    return parse(text, parsing_timeout=timeout_s)


def unreadable_math_answers(answers: list[str], timeout_s: int | None) -> set[str]:
    """The distinct ``answers`` math-verify cannot read within ``timeout_s`` each: a row with
    one would score every response 0 (``reward.kind=math`` compares with what it read)."""
    math_reference("\\frac{1}{2}", None)  # math-verify's grammar loads once, not on a deadline
    return {a for a in dict.fromkeys(answers) if not math_reference(a, timeout_s)}


# verl's default scorer (verl.utils.reward_score.default_compute_score) by data_source: the
# sources it scores with the rules rlcore has (reward.kind auto routes each row by its source)
VERL_SOURCES = {
    "openai/gsm8k": "gsm8k",
    "lighteval/MATH": "math",
    "DigitalLearningGmbH/MATH-lighteval": "math",
    "HuggingFaceH4/MATH-500": "math",
}


def scorer_of(kind: str, source: str | None) -> str:
    """The rule that scores a row: ``kind``, or for ``auto`` the row's data source's (a row
    without one, rlcore's own files and the synthetic task: gsm8k); ValueError for a source
    verl's default scorer does not score with gsm8k's or math's rule."""
    if kind != "auto":
        return kind
    if source is None:
        return "gsm8k"
    if source not in VERL_SOURCES:
        known = ", ".join(VERL_SOURCES)
        raise ValueError(
            f"reward.kind auto: data_source '{source}' has no scorer here (auto knows {known}); "
            "set reward.kind to gsm8k, math or custom"
        )
    return VERL_SOURCES[source]
