"""Worker processes kept warm between the runs of one program (a sweep, a notebook, a test
session, the attempts of a run that lost a worker): off unless asked for with
``keep_processes_warm()``.

Starting a run's processes costs seconds of CPU each (Python, torch, Ray's worker) before any
component is built. Inside ``keep_processes_warm()``, a run that ends cleanly closes its
components but keeps its ``Scheduler`` (its processes, their groups and CPU or GPU slots):

- the next run with the same plan and cluster settings builds its components in those
  processes as they are (``take``);
- a run with another plan that the kept slots can hold (the same Ray, device kind and nodes,
  every node still alive, as many slots per node or fewer) adopts, for each of its processes,
  a kept one that stands on the same node and devices with at most its share of them, gives it
  its new ranks and sets its groups up afresh; the kept processes it has no place for are
  stopped and the missing ones started (``adopt``). Kept slots on a lost node make the whole
  kept scheduler be stopped: the plan is placed afresh on the nodes left. A ``Scheduler`` used
  as a context manager keeps its processes when its block ends cleanly, as a run does.

A run that fails or is interrupted never hands its processes on: they may hold half-done
collectives. A run that loses a worker hands on only the processes that close their
components at once (``Scheduler.keep_survivors``): the supervisor's next attempt adopts them
and starts only the lost ones. One scheduler is kept at a time; any other scheduler that
starts adopts it or stops it first (its slots are free again).

Components are seeded when they are built, not when their process starts, so a run in warm
processes computes what it would compute in new ones (tests/runners: resumed and unbroken runs
compare bit for bit either way).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_state: dict[str, Any] = {"on": False, "kept": None}  # kept: (key, scheduler) or None


@contextmanager
def keep_processes_warm() -> Iterator[None]:
    """Keep a cleanly finished run's processes for the next run of the same plan (see the
    module docstring); the kept processes are stopped when the block ends."""
    before = _state["on"]
    _state["on"] = True
    try:
        yield
    finally:
        _state["on"] = before
        if not before:
            release()


def enabled() -> bool:
    return bool(_state["on"])


def take(key: Any) -> Any:
    """The kept scheduler if it was started for ``key`` and its processes all answer (it is
    no longer kept), else None (a kept one for another key stays kept, for ``adopt``)."""
    kept = _state["kept"]
    if kept is None or kept[0] != key:
        return None
    _state["kept"] = None
    if kept[1].is_alive():
        return kept[1]
    kept[1].shutdown()
    return None


def adopt(can_host: Callable[[Any], bool]) -> Any:
    """The kept scheduler, handed over (no longer kept), if ``can_host(it)`` (its slots can
    hold the plan of the scheduler starting: ``Scheduler.can_host``) and its processes answer;
    else None, and a kept one is stopped (it holds slots)."""
    kept = _state["kept"]
    if kept is None:
        return None
    _state["kept"] = None
    scheduler = kept[1]
    if can_host(scheduler) and scheduler.is_alive():
        return scheduler
    scheduler.shutdown()
    return None


def give(key: Any, scheduler: Any) -> bool:
    """Keep ``scheduler`` (its components closed) for the next run of ``key`` (None: for
    ``adopt`` only, a scheduler that lost processes), if processes are kept warm (True); an
    earlier kept one is stopped."""
    if not enabled():
        return False
    release()
    _state["kept"] = (key, scheduler)
    return True


def keep(key: Any, scheduler: Any, wait_s: float = 10.0) -> bool:
    """Keep a cleanly finished ``scheduler`` for the next run of ``key`` (``give``) if
    processes are kept warm and its components all close within ``wait_s``
    (``Scheduler.release_components``: a process that does not makes it stop them all)."""
    return enabled() and scheduler.release_components(wait_s) and give(key, scheduler)


def keep_survivors(scheduler: Any, wait_s: float) -> bool:
    """Keep the processes of ``scheduler`` that survive a loss for the next attempt to adopt
    (``Scheduler.keep_survivors``), if processes are kept warm and any survive."""
    return enabled() and scheduler.keep_survivors(wait_s) and give(None, scheduler)


def release() -> None:
    """Stop the kept scheduler."""
    kept = _state["kept"]
    if kept is not None:
        _state["kept"] = None
        kept[1].shutdown()
