"""How a config key is declared: a dataclass field with its default, a one-line doc and, for a
number, the range of values it accepts."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from typing import Any

REQUIRED: Any = dataclasses.MISSING


@dataclasses.dataclass(frozen=True)
class Range:
    """Accepted numbers: written ``"[0, 1]"``, ``"(0, 1]"``, ``"> 0"``, ``">= 1"`` or ``"any"``
    (any finite number). NaN and infinities are never accepted."""

    spec: str
    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False

    @classmethod
    def parse(cls, spec: str) -> Range:
        if spec == "any":
            return cls(spec)
        bound = re.fullmatch(r"(>=|>)\s*(-?[\d.e+-]+)", spec)
        if bound:
            return cls(spec, low=float(bound[2]), low_open=bound[1] == ">")
        interval = re.fullmatch(r"([\[(])\s*(-?[\d.e+-]+),\s*(-?[\d.e+-]+)\s*([\])])", spec)
        if not interval:
            raise ValueError(f"range {spec!r}: write [a, b], (a, b], > a, >= a or any")
        return cls(
            spec, float(interval[2]), float(interval[3]), interval[1] == "(", interval[4] == ")"
        )

    def __contains__(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def text(self) -> str:
        """As messages say it: ``in [0, 1]``, ``> 0``, ``a finite number``."""
        if self.spec == "any":
            return "a finite number"
        return self.spec if self.spec[0] in "<>" else f"in {self.spec}"


def key(
    default: Any = REQUIRED,
    *,
    doc: str,
    factory: Callable[[], Any] | None = None,
    range: str | None = None,
    modes: tuple[str, ...] | None = None,
) -> Any:
    """A config key with ``default`` (or none: ``REQUIRED``), its one-line ``doc`` and, for a
    number (or a list of numbers: each item), its accepted ``range`` (see ``Range``).

    ``modes``: the modes that read it, when not all; elsewhere a value other than the default is
    refused (a key the config accepts is honoured). A mutable default (a list) is given as
    ``factory``, which makes a fresh one per config.
    """
    metadata: dict[str, Any] = {"doc": doc}
    if range is not None:
        metadata["range"] = Range.parse(range)
    if modes is not None:
        metadata["modes"] = modes
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def section(cls: type, *, doc: str, modes: tuple[str, ...] | None = None) -> Any:
    """A nested section; it has a default when every key in it has one. ``modes`` as for
    ``key``: the whole section must keep its defaults in the other modes."""
    has_all_defaults = all(
        f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        for f in dataclasses.fields(cls)
    )
    metadata: dict[str, Any] = {"doc": doc}
    if modes is not None:
        metadata["modes"] = modes
    if has_all_defaults:
        return dataclasses.field(default_factory=cls, metadata=metadata)
    return dataclasses.field(metadata=metadata)
