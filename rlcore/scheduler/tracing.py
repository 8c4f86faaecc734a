"""What each component's calls cost in a one-process run: the placement profiler's tracer
(``rlcore placement --profile``, ``rlcore.runners.profiling``).

While a ``Tracer`` is active (``tracing``), the components an ``InDriver`` deployment builds are
handed out wrapped (``Traced``): each call of a public method is timed, and counted under the
driver's current stage (``stage``, set by the runner's stopwatch), the component and its caller
(the driver, or the component whose call made it). Seconds are the component's own: the time of
the calls it made to other components in the meantime is counted under those. Bytes are the
tensors the call carried, arguments and answer, what a call between two processes would move.
"""

from __future__ import annotations

import contextvars
import inspect
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

DRIVER = "driver"
# The driver's current stage (``Stopwatch``); calls outside any stage count under "other".
stage: contextvars.ContextVar[str] = contextvars.ContextVar("rlcore_stage", default="other")
_active: contextvars.ContextVar[Tracer | None] = contextvars.ContextVar(
    "rlcore_tracer", default=None
)


@dataclass
class Tally:
    seconds: float = 0.0
    calls: int = 0
    bytes: int = 0


def tensor_bytes(value: Any, depth: int = 0) -> int:
    """The bytes of the tensors in ``value`` (tensors, tensordicts, and lists, tuples and dicts
    of them, a few levels deep)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if depth > 4:
        return 0
    if hasattr(value, "values") and hasattr(value, "batch_size"):  # a TensorDict
        return sum(tensor_bytes(v, depth + 1) for v in value.values())
    if isinstance(value, dict):
        return sum(tensor_bytes(v, depth + 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(v, depth + 1) for v in value)
    return 0


class Tracer:
    """The tallies of the calls made while it is active, by (stage, component, caller)."""

    def __init__(self) -> None:
        self.tallies: dict[tuple[str, str, str], Tally] = {}
        self._local = threading.local()
        self._lock = threading.Lock()

    def use(self, tallies: dict[tuple[str, str, str], Tally]) -> None:
        """Count the calls from now on in ``tallies`` (one dict per setting measured in turns)."""
        with self._lock:
            self.tallies = tallies

    def call(self, component: str, fn: Any, args: tuple, kwargs: dict) -> Any:
        frames = self._local.__dict__.setdefault("frames", [])
        caller = frames[-1][0] if frames else DRIVER
        frame = [component, 0.0]  # the seconds of the calls it makes meanwhile
        frames.append(frame)
        start = time.perf_counter()
        try:
            answer = fn(*args, **kwargs)
        finally:
            elapsed = time.perf_counter() - start
            frames.pop()
            if frames:
                frames[-1][1] += elapsed
        carried = tensor_bytes(args) + tensor_bytes(kwargs) + tensor_bytes(answer)
        with self._lock:
            tally = self.tallies.setdefault((stage.get(), component, caller), Tally())
            tally.seconds += elapsed - frame[1]
            tally.calls += 1
            tally.bytes += carried
        return answer


class Traced:
    """A component built in the driver, its public methods timed by ``tracer``."""

    def __init__(self, target: Any, component: str, tracer: Tracer) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_component", component)
        object.__setattr__(self, "_tracer", tracer)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if name.startswith("_") or not inspect.ismethod(value):
            return value

        def timed(*args: Any, **kwargs: Any) -> Any:
            return self._tracer.call(self._component, value, args, kwargs)

        return timed

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target, name, value)


def active() -> Tracer | None:
    """The tracer components built now are wrapped by, if any."""
    return _active.get()


@contextmanager
def tracing(tracer: Tracer) -> Iterator[Tracer]:
    """Components built in the driver inside this block are traced by ``tracer``."""
    token = _active.set(tracer)
    try:
        yield tracer
    finally:
        _active.reset(token)


@contextmanager
def in_stage(name: str) -> Iterator[None]:
    """Calls inside this block count under stage ``name``."""
    token = stage.set(name)
    try:
        yield
    finally:
        stage.reset(token)
