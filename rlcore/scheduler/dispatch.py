"""How the driver calls a component's method on the component's ranks: each worker method says it
with ``@dispatch(...)``, and a handle (``handles.py``) does what it says.

    class ActorWorker:
        @dispatch(Dispatch.SHARD_REDUCED)
        def update(self, batch: TensorDict) -> dict[str, float]: ...

Modes (a method without a decorator is ``ALL``):

- ``SHARD``: the first argument (a ``TensorDict`` or tensor) is split into equal contiguous shards,
  rank r gets shard r; the results (``TensorDict`` or tensor) are concatenated in rank order.
- ``SHARD_REDUCED``: split as ``SHARD``; every rank returns the same, already all-reduced result
  (an update's metrics), and rank 0's is returned.
- ``GATHER``: every rank gets the same arguments; the results are concatenated in rank order
  (each env rank's trajectories).
- ``ALL``: every rank gets the same arguments and returns the same result; rank 0's is returned.
- ``RANK0``: only rank 0 runs it (evaluation, a description of the component).

A component placed in the driver's own process has one rank and is called directly: there is
nothing to split or gather.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])
ATTRIBUTE = "__rlcore_dispatch__"


class Dispatch(enum.Enum):
    SHARD = "shard"
    SHARD_REDUCED = "shard_reduced"
    GATHER = "gather"
    ALL = "all"
    RANK0 = "rank0"


def dispatch(mode: Dispatch) -> Callable[[F], F]:
    """Mark a worker method with how its handle calls it over the component's ranks."""

    def mark(fn: F) -> F:
        setattr(fn, ATTRIBUTE, mode)
        return fn

    return mark


def dispatch_mode(cls: type, method: str) -> Dispatch:
    """The mode of ``cls.method``; ``AttributeError`` naming the public methods if it has none."""
    fn = getattr(cls, method, None)
    if method.startswith("_") or not callable(fn):
        public = ", ".join(sorted(public_methods(cls)))
        raise AttributeError(f"{cls.__name__} has no method '{method}' to call (it has: {public})")
    return getattr(fn, ATTRIBUTE, Dispatch.ALL)


def public_methods(cls: type) -> list[str]:
    return [n for n in dir(cls) if not n.startswith("_") and callable(getattr(cls, n))]
