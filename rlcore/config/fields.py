"""How a config key is declared: a dataclass field with its default and a one-line doc."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

REQUIRED: Any = dataclasses.MISSING


def key(default: Any = REQUIRED, *, doc: str, factory: Callable[[], Any] | None = None) -> Any:
    """A config key with ``default`` (or none: ``REQUIRED``) and its one-line ``doc``.

    A mutable default (a list) is given as ``factory``, which makes a fresh one per config.
    """
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata={"doc": doc})
    return dataclasses.field(default=default, metadata={"doc": doc})


def section(cls: type, *, doc: str) -> Any:
    """A nested section; it has a default when every key in it has one."""
    has_all_defaults = all(
        f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        for f in dataclasses.fields(cls)
    )
    if has_all_defaults:
        return dataclasses.field(default_factory=cls, metadata={"doc": doc})
    return dataclasses.field(metadata={"doc": doc})
