"""How long the driver waits for a worker's answer before it counts the worker as lost.

A worker that died is seen at once (Ray says so); one that is stopped (SIGSTOP, a frozen
machine) or hung (an env step stuck in C code, a deadlock) answers nothing, and a wait without a
deadline would wait forever, in silence. Each call's deadline is ``FACTOR`` times the longest
the same method took on the same component so far, and never less than
``cluster.worker_timeout_s``; a method's first call (or a call not named), which may load
models, compile or wait for a busy machine, has no history to go by and waits at least
``FIRST_CALL_S``. Past it the worker is ``WorkerLost``: the supervisor restarts it from the
newest checkpoint as after a death (``runner.max_restarts``). One mechanism for every wait on a
worker (``WorkerGroup.get``).
"""

from __future__ import annotations

FACTOR = 10.0  # a call 10x slower than the slowest before it is not a slow call
FIRST_CALL_S = 600.0  # (measured: a resumed run's first calls took over 4 s on a loaded CI)


class Deadlines:
    def __init__(self, floor_s: float) -> None:
        self.floor_s = floor_s
        self._longest: dict[str, float] = {}

    def limit(self, method: str | None) -> float:
        """Seconds to wait for ``method`` (None: a call not named)."""
        if method not in self._longest:
            return max(self.floor_s, FIRST_CALL_S)
        return max(self.floor_s, FACTOR * self._longest[method])

    def record(self, method: str | None, seconds: float) -> None:
        if method is not None:
            self._longest[method] = max(seconds, self._longest.get(method, 0.0))
