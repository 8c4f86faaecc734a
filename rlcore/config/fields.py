"""How a config key is declared: a dataclass field with its default, a one-line doc and, for a
number, the range of values it accepts. Sections are frozen dataclasses: a validated config is
never changed (its lists are tuples, its mappings ``FrozenDict``s)."""

from __future__ import annotations

import dataclasses
import functools
import json
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
    path: bool = False,
) -> Any:
    """A config key with ``default`` (or none: ``REQUIRED``), its one-line ``doc`` and, for a
    number (or a list of numbers: each item), its accepted ``range`` (see ``Range``).

    ``path``: the value names a file or folder (each item of a list does): a leading ``~`` is
    the user's home, as in a shell, also where the shell did not expand it (quoted, in YAML).

    ``modes``: the modes that read it, when not all; elsewhere a value other than the default is
    refused (a key the config accepts is honoured). A list default is given as ``factory``; the
    config holds it, as every list, as a tuple.
    """
    metadata: dict[str, Any] = {"doc": doc}
    if range is not None:
        metadata["range"] = Range.parse(range)
    if modes is not None:
        metadata["modes"] = modes
    if path:
        metadata["path"] = True
    if factory is not None:
        return dataclasses.field(default_factory=lambda: frozen(factory()), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def section(
    cls: type,
    *,
    doc: str,
    modes: tuple[str, ...] | None = None,
    defaults: dict[str, Any] | None = None,
) -> Any:
    """A nested section; it has a default when every key in it has one. ``modes`` as for
    ``key``: the whole section must keep its defaults in the other modes. ``defaults``: this
    use's own defaults for some of the section's keys, in place of those ``cls`` declares (one
    runner section with each mode's defaults; one optimiser section with the actor's and the
    critic's); the key reference shows them."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    defaults = dict(defaults or {})
    unknown = sorted(set(defaults) - set(fields))
    if unknown:
        raise TypeError(f"{cls.__name__} has no key {', '.join(unknown)} to give a default")
    has_all_defaults = all(
        name in defaults
        or f.default is not dataclasses.MISSING
        or f.default_factory is not dataclasses.MISSING
        for name, f in fields.items()
    )
    metadata: dict[str, Any] = {"doc": doc}
    if modes is not None:
        metadata["modes"] = modes
    if defaults:
        metadata["defaults"] = defaults
    if has_all_defaults:
        return dataclasses.field(
            default_factory=functools.partial(cls, **defaults), metadata=metadata
        )
    return dataclasses.field(metadata=metadata)


def default_of(field: dataclasses.Field, defaults: dict[str, Any] | None = None) -> Any:
    """``field``'s default where it is declared in a section given ``defaults`` (the section's
    own, ``section(..., defaults=)``); ``REQUIRED`` when it has none."""
    if defaults and field.name in defaults:
        return defaults[field.name]
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return REQUIRED


class FrozenDict(dict):
    """A mapping of a validated config: read like a dict, never changed (a frozen config holds
    no mutable value), pickled as a dict would be."""

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            "a validated config is not changed in place: build another one "
            "(dataclasses.replace, or load_config with overrides)"
        )

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self) -> tuple:
        return (FrozenDict, (dict(self),))


def frozen(value: Any) -> Any:
    """``value`` as a frozen config holds it: lists as tuples, mappings as ``FrozenDict``s."""
    if isinstance(value, (list, tuple)):
        return tuple(frozen(item) for item in value)
    if isinstance(value, dict) and not isinstance(value, FrozenDict):
        return FrozenDict({name: frozen(item) for name, item in value.items()})
    return value


def thawed(value: Any) -> Any:
    """A frozen config value as plain Python data again (tuples as lists, ``FrozenDict``s as
    dicts): what a user's code (an env's constructor) is given."""
    if isinstance(value, (list, tuple)):
        return [thawed(item) for item in value]
    if isinstance(value, dict):
        return {name: thawed(item) for name, item in value.items()}
    return value


def as_plain(config: Any) -> dict[str, Any]:
    """A config (any section) as plain data: ``dataclasses.asdict`` with lists for tuples and
    dicts for ``FrozenDict``s, as JSON, YAML and the loggers take it."""
    return json.loads(json.dumps(dataclasses.asdict(config)))
