"""Close-match hints for error messages about misspelled names."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(word: str, candidates: Iterable[str], n: int = 1) -> list[str]:
    """The up-to-``n`` candidates that look most like ``word``, best first."""
    return difflib.get_close_matches(word, list(candidates), n=n, cutoff=0.6)


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest candidate, or ``""`` when none is close.

    >>> did_you_mean("clip_ratio_hi", ["clip_ratio_high", "gamma"])
    " (did you mean 'clip_ratio_high'?)"
    """
    match = closest(word, candidates)
    return f" (did you mean '{match[0]}'?)" if match else ""
