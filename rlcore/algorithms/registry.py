"""A name -> function registry, so users add estimators and losses without forking rlcore."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from rlcore.did_you_mean import did_you_mean

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Entry(Generic[F]):
    """A registered function and the facts about it that config validation needs.

    ``extra_kwargs``: its keyword-only parameters beyond the registry's required ones, in
    signature order (a policy loss's options: the caller passes exactly these).
    """

    fn: F
    traits: dict[str, Any] = field(default_factory=dict)
    extra_kwargs: tuple[str, ...] = ()


class Registry(Generic[F]):
    """Functions registered under unique names, each checked to take ``required_kwargs``.

    ``kind`` names what is registered ("advantage estimator"), for error messages.
    """

    def __init__(self, kind: str, required_kwargs: Iterable[str]) -> None:
        self.kind = kind
        self.required_kwargs = tuple(required_kwargs)
        self._entries: dict[str, Entry[F]] = {}

    def register(self, name: str, **traits: Any) -> Callable[[F], F]:
        """Decorator registering a function under ``name``; ``traits`` describe it."""

        def decorator(fn: F) -> F:
            if name in self._entries:
                raise ValueError(
                    f"{self.kind} '{name}' is already registered "
                    f"(by {self._entries[name].fn.__module__}); pick another name"
                )
            self._check_signature(name, fn)
            self._entries[name] = Entry(fn, dict(traits), self._extra_kwargs(fn))
            return fn

        return decorator

    def entry(self, name: str) -> Entry[F]:
        """The entry for ``name``; a ``KeyError`` listing the known names otherwise."""
        try:
            return self._entries[name]
        except KeyError:
            hint = did_you_mean(name, self._entries)
            known = ", ".join(sorted(self._entries))
            raise KeyError(f"unknown {self.kind} '{name}'{hint}; known: {known}") from None

    def get(self, name: str) -> F:
        return self.entry(name).fn

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def _extra_kwargs(self, fn: F) -> tuple[str, ...]:
        params = inspect.signature(fn).parameters.values()
        return tuple(
            p.name
            for p in params
            if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in self.required_kwargs
        )

    def _check_signature(self, name: str, fn: F) -> None:
        params = inspect.signature(fn).parameters
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            return
        missing = [k for k in self.required_kwargs if k not in params]
        if missing:
            raise TypeError(
                f"{self.kind} '{name}' ({fn.__qualname__}) must accept the keyword arguments "
                f"{', '.join(missing)}: rlcore calls every {self.kind} the same way"
            )
