"""``ScoringPool``: judging that may not finish (math-verify's sympy, a user's function) runs in
worker processes under a deadline that holds.

A thread cannot be stopped, and a scorer stuck in C code (sympy on ``9^{9^{9^{9}}}``, a huge
integer power) holds the GIL: a timeout on a thread neither frees the run nor lets Ctrl-C
through. A process can be killed. Each response gets ``reward.timeout_s`` in one of
``reward.num_processes`` processes (the clock starts when a ready process takes it); past it,
the process is killed and replaced (by a warm spare, already started, when it is ready), and
the response scores 0 and counts as timed out. So a batch of B responses takes at most
``ceil(B / num_processes) * timeout_s`` plus the restarts, whatever the scorer does; a batch
where most time out ends the run (``reward.max_timeout_share``, in the reward worker). The
verdicts themselves: ``judge.py``.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import signal
import time
from collections import deque
from typing import Any

from rlcore.config.errors import ConfigError
from rlcore.rewards.judge import Rules, Verdict, judge, serve

__all__ = ["RewardError", "Rules", "ScoringPool", "Verdict", "judge"]

START_TIMEOUT_S = 60.0  # a scoring process that is not ready by then is a failure


class RewardError(ConfigError):
    """A custom reward function that raised or returned something other than a finite number
    (or ``{"score": number, "correct": bool}``), named by ``reward.custom_fn``: the run stops."""


class ScoringPool:
    """``reward.num_processes`` scoring processes (see the module docstring)."""

    def __init__(self, config: Any, kind: str | None = None) -> None:
        """``kind``: the rule to score with, in place of ``config.kind`` (math, for the rows
        that ``reward.kind`` auto routes to it)."""
        self.rules = Rules.of(config, kind)
        self.timeout_s = config.timeout_s
        # spawn: a fork of a process running torch's threads may deadlock
        self._context = multiprocessing.get_context("spawn")
        self._workers: list[tuple[Any, Any]] = []
        self._ready: list[bool] = []
        for _ in range(config.num_processes):
            self._workers.append(self._start())
            self._ready.append(False)
        # a warm spare: a process killed past its deadline is replaced by one already started
        # (its custom function loaded, math-verify warmed up), not by one that starts then
        self._spare: tuple[Any, Any] = self._start()
        self._spare_ready = False

    def _start(self) -> tuple[Any, Any]:
        parent, child = self._context.Pipe()
        process = self._context.Process(target=serve, args=(child, self.rules), daemon=True)
        process.start()
        child.close()
        return process, parent

    def score(self, pairs: list[tuple]) -> list[Verdict]:
        """One verdict per ``(response, answer)`` (or ``(response, answer, data_source,
        extra_info)``, for a custom function written as verl's), in order; ``RewardError`` for
        a bad reward."""
        busy: dict[int, tuple[int, float]] = {}  # worker -> (index, deadline)
        try:
            return self._score(pairs, busy)
        except BaseException:  # a bad reward, Ctrl-C: no process keeps a stale response
            for worker in busy:
                self._replace(worker)
            raise

    def _score(self, pairs: list[tuple], busy: dict[int, tuple[int, float]]) -> list[Verdict]:
        results: list[Verdict | None] = [None] * len(pairs)
        todo = deque(enumerate(pairs))
        idle = [w for w, ready in enumerate(self._ready) if ready]
        while todo or busy:
            while todo and idle:
                worker, (index, item) = idle.pop(), todo.popleft()
                self._workers[worker][1].send((index, *item))
                busy[worker] = (index, time.monotonic() + self.timeout_s)
            starting = [w for w, ready in enumerate(self._ready) if not ready]
            deadlines = [deadline for _, deadline in busy.values()]
            wait_s = max(0.0, min(deadlines) - time.monotonic()) if deadlines else START_TIMEOUT_S
            conns = {self._workers[w][1]: w for w in [*busy, *starting]}
            answered = multiprocessing.connection.wait(list(conns), timeout=wait_s)
            if not answered and not busy:
                raise RewardError(
                    f"reward: no scoring process started within {START_TIMEOUT_S:g} s"
                )
            for conn in answered:
                worker = conns[conn]
                try:
                    index, result = conn.recv()
                except EOFError:  # the process died: on a response, the run stops naming it
                    if worker in busy:
                        raise RewardError(self._death(worker, busy[worker][0])) from None
                    self._replace(worker)  # (one still starting: another is started)
                    if self._ready[worker]:
                        idle.append(worker)
                    continue
                if index == "failed":
                    raise RewardError(f"reward.custom_fn: {self.rules.custom_fn}: {result}")
                if index == "ready":
                    self._ready[worker] = True
                    idle.append(worker)
                    continue
                if isinstance(result, str):
                    raise RewardError(result)
                results[index] = result if result is not None else Verdict(0.0, False, True)
                del busy[worker]
                if self._ready[worker]:
                    idle.append(worker)
            now = time.monotonic()
            for worker, (index, deadline) in list(busy.items()):
                if now >= deadline:
                    self._replace(worker)
                    results[index] = Verdict(0.0, False, timed_out=True)
                    del busy[worker]
                    if self._ready[worker]:  # the warm spare
                        idle.append(worker)
        return [r for r in results if r is not None]

    def _death(self, worker: int, index: int) -> str:
        """One line on a scoring process that died scoring response ``index``: its exit code
        or signal, told apart from a timeout (which scores 0 and goes on)."""
        process = self._workers[worker][0]
        process.join(timeout=5)
        code = process.exitcode
        if code is not None and code < 0:
            how = f"killed by {signal.Signals(-code).name}"
            how += " (out of memory?)" if -code == signal.SIGKILL else ""
        else:
            how = f"exit code {code} (os._exit, or a crash in native code)"
        scorer = f"reward.custom_fn {self.rules.custom_fn}" if self.rules.custom_fn else "reward"
        return f"{scorer}: the scoring process died on response {index}, {how}; not a timeout"

    def _replace(self, worker: int) -> None:
        """Kill ``worker``'s process; the warm spare takes its place when it is ready (and a
        new spare starts), else a new process (ready when it says so)."""
        process, conn = self._workers[worker]
        process.kill()
        process.join(timeout=5)
        conn.close()
        if self._spare_is_ready():
            self._workers[worker], self._ready[worker] = self._spare, True
            self._spare, self._spare_ready = self._start(), False
        else:
            self._workers[worker], self._ready[worker] = self._start(), False

    def _spare_is_ready(self) -> bool:
        process, conn = self._spare
        if not self._spare_ready and conn.poll(0):
            try:
                tag, _ = conn.recv()
            except EOFError:
                tag = "died"
            if tag != "ready":  # (a failing start fails the workers too, and is said there)
                process.kill()
                self._spare = self._start()
                return False
            self._spare_ready = True
        return self._spare_ready

    def close(self) -> None:
        """Stop the processes: a ready one when asked, one still starting at once."""
        self._workers.append(self._spare)
        self._ready.append(self._spare_ready)
        for (process, conn), ready in zip(self._workers, self._ready, strict=True):
            if not ready:
                process.kill()
            with contextlib.suppress(OSError):
                conn.send(None)
        for process, conn in self._workers:
            process.join(timeout=2)
            if process.is_alive():
                process.kill()
                process.join(timeout=5)
            conn.close()
