"""``DeadlinePool``: work that may not finish (a reward scorer in sympy, a user's function, a
tool call) runs in worker processes under a deadline that holds.

A thread cannot be stopped, and code stuck in C (sympy on ``9^{9^{9^{9}}}``, a huge integer
power) holds the GIL: a timeout on a thread neither frees the run nor lets Ctrl-C through. A
process can be killed. Each item gets ``timeout_s`` in one of ``processes`` processes (the clock
starts when a ready process takes it); past it, the process is killed and replaced (by a warm
spare, already started, when it is ready) and the item's outcome is ``TIMEOUT``. So a batch of N
items takes at most ``ceil(N / processes) * timeout_s`` plus the restarts, whatever the work
does; ``run(budget_s=...)`` bounds the whole batch too (work that keeps timing out would
otherwise cost a deadline and a restarted process per item): past it, the items running are
stopped (``TIMEOUT``) and those not started are ``SKIPPED``, as they are once more than
``max_timeouts`` items timed out (for a caller that gives up on such a batch anyway). Users:
the reward's ``ScoringPool`` (rlcore/rewards/scoring.py) and the rollout's tool calls
(rlcore/tools/pool.py).

The protocol of a process's ``serve(conn, payload)``: it sends ``("ready", None)`` once set up
(or ``("failed", message)`` and returns), then answers each ``(index, *item)`` with
``(index, result)`` until it receives ``None``.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import multiprocessing.connection
import os
import signal
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

START_TIMEOUT_S = 60.0  # a process that is not ready by then is a failure

# How the processes start: forked by multiprocessing's fork server, a single-threaded process that
# this one starts once (a fork of this process itself could deadlock on a lock that one of
# torch's threads holds). A new process, spawned or forked, runs this program's main module
# again (multiprocessing does so that the functions it names can be found); an entry point's
# imports torch and rlcore's config, about 1.7 CPU-s a process on these cores, which the
# server, having imported them once (``PRELOAD``), spares each process it forks (a replacement
# after a deadline then starts in a few milliseconds, not seconds). Each process starts with
# this one's environment, working folder and ``sys.path`` of the moment, as a spawned one would.
START_METHOD = "forkserver"

# what the fork server imports: what the processes import (their serving code, the reward's
# math-verify) and what an entry point's main module does (rlcore.cli: torch, the config)
PRELOAD = ("rlcore.cli", "rlcore.rewards.verdicts", "rlcore.tools.pool", "math_verify")
_preload: list[str] = list(PRELOAD)


def forkserver_context(preload: Sequence[str] = ()) -> Any:
    """multiprocessing's fork-server context, its server to import ``PRELOAD`` and the modules
    that any caller in this process has added (``preload``): one server serves them all, and
    the list is read once, when it starts."""
    _preload.extend(name for name in preload if name not in _preload)
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(_preload)
    return context


def _serve_in(serve: Callable[..., None], conn: Any, payload: Any, env: dict[str, str]) -> None:
    """A process's start: the caller's environment of the moment (the fork server's is that of
    when it started), then ``serve(conn, payload)``."""
    os.environ.clear()
    os.environ.update(env)
    serve(conn, payload)


def serve_items(
    conn: Any, setup: Callable[[], Any], answer: Callable[[Any, int, tuple], Any]
) -> None:
    """The process side of the protocol: ``state = setup()`` (an error is sent as ``"failed"``),
    ``"ready"``, then each ``(index, *item)`` answered with ``(index, answer(state, index,
    item))`` until ``None`` or a closed pipe."""
    try:
        state = setup()
    except Exception as error:
        conn.send(("failed", f"{type(error).__name__}: {error}"))
        return
    conn.send(("ready", None))
    while True:
        try:
            message = conn.recv()
        except (EOFError, KeyboardInterrupt):
            return
        if message is None:
            return
        index, *item = message
        conn.send((index, answer(state, index, tuple(item))))


class Overtime(BaseException):
    """Raised in a process's main thread at its ``SoftDeadline`` (a ``BaseException``: the
    ``except Exception`` of the code it stops does not swallow it)."""


class SoftDeadline:
    """The process side's own deadline, a little before the pool's: at it, a watchdog thread
    sends SIGUSR1 to the main thread, whose handler raises ``Overtime`` there, which stops
    Python-level work (a ``time.sleep``, sympy's loops) without the kill and the restart that
    the pool's deadline costs. Code stuck in C (a huge integer power) does not see it: the
    pool's kill remains the deadline that holds. SIGUSR1, not SIGALRM: math-verify and users'
    timeout decorators set and cancel the alarm. Install in the main thread."""

    def __init__(self) -> None:
        import threading

        self._main = threading.main_thread().ident
        self._wake = threading.Condition()
        self._deadline: float | None = None
        self._fired = False
        signal.signal(signal.SIGUSR1, self._raise)
        threading.Thread(target=self._watch, daemon=True, name="soft-deadline").start()

    @contextlib.contextmanager
    def within(self, seconds: float) -> Any:
        """``Overtime`` in this block past ``seconds``."""
        with self._wake:
            self._deadline, self._fired = time.monotonic() + seconds, False
            self._wake.notify()
        try:
            yield
        finally:
            with self._wake:
                self._deadline, self._fired = None, False

    def _raise(self, signum: int, frame: Any) -> None:
        if self._fired:  # (a signal still pending after the block ended is ignored)
            self._fired = False
            raise Overtime

    def _watch(self) -> None:
        with self._wake:
            while True:
                if self._deadline is None:
                    self._wake.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._wake.wait(left)
                    continue
                self._deadline, self._fired = None, True
                signal.pthread_kill(self._main, signal.SIGUSR1)


class PoolFailed(RuntimeError):
    """A process could not set up (its ``"failed"`` message), or none started in time."""


@dataclass(frozen=True)
class Outcome:
    """One item's end: ``result`` (``kind`` "ok"), past its deadline ("timeout"), or its process
    died on it ("died", ``result``: how, e.g. "killed by SIGKILL (out of memory?)")."""

    kind: str
    result: Any = None


TIMEOUT = Outcome("timeout")
SKIPPED = Outcome("skipped")  # not started: the batch's budget was spent, or too many timed out


class DeadlinePool:
    """``processes`` processes running ``serve(conn, payload)`` (see the module docstring)."""

    def __init__(
        self, serve: Callable[..., None], payload: Any, processes: int, timeout_s: float
    ) -> None:
        self.serve, self.payload, self.timeout_s = serve, payload, timeout_s
        self._context = (
            forkserver_context()
            if START_METHOD == "forkserver"
            else multiprocessing.get_context(START_METHOD)
        )
        self._workers: list[tuple[Any, Any]] = []
        self._ready: list[bool] = []
        for _ in range(processes):
            self._workers.append(self._start())
            self._ready.append(False)
        # a warm spare: a process killed past its deadline is replaced by one already started
        self._spare: tuple[Any, Any] = self._start()
        self._spare_ready = False

    def _start(self) -> tuple[Any, Any]:
        parent, child = self._context.Pipe()
        args = (self.serve, child, self.payload, dict(os.environ))
        process = self._context.Process(target=_serve_in, args=args, daemon=True)
        process.start()
        child.close()
        return process, parent

    def run(
        self,
        items: list[tuple],
        stop_on_death: bool = False,
        budget_s: float | None = None,
        max_timeouts: int | None = None,
        timed_out: Callable[[Any], bool] | None = None,
    ) -> list[Outcome]:
        """One ``Outcome`` per item, in order. ``stop_on_death``: return at the first process
        that dies on an item (its outcome "died", the items not done ``None``). ``budget_s``:
        the whole batch's seconds, counted from its first item's start; ``max_timeouts``: the
        ``TIMEOUT`` items (and results that ``timed_out`` says timed out in their process: a
        ``SoftDeadline``) after which the rest are not run (see the module docstring)."""
        busy: dict[int, tuple[int, float]] = {}  # worker -> (index, deadline)
        limits = (budget_s, max_timeouts, timed_out)
        try:
            return self._run(items, busy, stop_on_death, *limits)
        except BaseException:  # Ctrl-C, a failed start: no process keeps a stale item
            for worker in busy:
                self._replace(worker)
            raise

    def _run(
        self,
        items: list[tuple],
        busy: dict[int, tuple[int, float]],
        stop_on_death: bool,
        budget_s: float | None,
        max_timeouts: int | None,
        timed_out: Callable[[Any], bool] | None,
    ) -> list[Outcome]:
        results: list[Outcome | None] = [None] * len(items)
        todo = deque(enumerate(items))
        idle = [w for w, ready in enumerate(self._ready) if ready]
        end = math.inf  # the batch's deadline, set when its first item starts
        timeouts = 0
        while todo or busy:
            spent = time.monotonic() >= end
            if spent or (max_timeouts is not None and timeouts > max_timeouts):
                for worker, (index, _) in busy.items():  # (stopped mid-item)
                    self._replace(worker)
                    results[index] = TIMEOUT if spent else SKIPPED
                busy.clear()
                for index, _ in todo:
                    results[index] = SKIPPED
                break
            while todo and idle:
                worker, (index, item) = idle.pop(), todo.popleft()
                self._workers[worker][1].send((index, *item))
                now = time.monotonic()
                if budget_s is not None and end == math.inf:
                    end = now + budget_s
                busy[worker] = (index, min(now + self.timeout_s, end))
            starting = [w for w, ready in enumerate(self._ready) if not ready]
            deadlines = [deadline for _, deadline in busy.values()]
            wait_s = (
                max(0.0, min(deadlines) - time.monotonic())
                if deadlines
                else min(START_TIMEOUT_S, max(0.0, end - time.monotonic()))
            )
            conns = {self._workers[w][1]: w for w in [*busy, *starting]}
            answered = multiprocessing.connection.wait(list(conns), timeout=wait_s)
            if not answered and not busy:
                if time.monotonic() >= end:  # the budget ran out waiting for a restart
                    continue
                raise PoolFailed(f"no process started within {START_TIMEOUT_S:g} s")
            for conn in answered:
                worker = conns[conn]
                try:
                    index, result = conn.recv()
                except EOFError:  # the process died
                    if worker in busy:
                        index = busy.pop(worker)[0]
                        results[index] = Outcome("died", self._death(worker))
                        if stop_on_death:
                            for other in [worker, *busy]:
                                self._replace(other)
                            busy.clear()
                            return results  # type: ignore[return-value]
                    self._replace(worker)
                    if self._ready[worker]:
                        idle.append(worker)
                    continue
                if index == "failed":
                    raise PoolFailed(result)
                if index == "ready":
                    self._ready[worker] = True
                    idle.append(worker)
                    continue
                results[index] = Outcome("ok", result)
                timeouts += timed_out is not None and timed_out(result)
                del busy[worker]
                if self._ready[worker]:
                    idle.append(worker)
            now = time.monotonic()
            for worker, (index, deadline) in list(busy.items()):
                if now >= deadline:
                    self._replace(worker)
                    results[index] = TIMEOUT
                    timeouts += 1
                    del busy[worker]
                    if self._ready[worker]:  # the warm spare
                        idle.append(worker)
        return results  # type: ignore[return-value]

    def _death(self, worker: int) -> str:
        """How ``worker``'s process ended: its exit code or signal (told apart from a
        timeout)."""
        process = self._workers[worker][0]
        process.join(timeout=5)
        code = process.exitcode
        if code is not None and code < 0:
            how = f"killed by {signal.Signals(-code).name}"
            return how + (" (out of memory?)" if -code == signal.SIGKILL else "")
        return f"exit code {code} (os._exit, or a crash in native code)"

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
