"""Worker processes kept warm between the runs of one program (a sweep, a notebook, a test
session): off unless asked for with ``keep_processes_warm()``.

Starting a run's processes costs seconds of CPU each (Python, torch, Ray's worker, the gloo
groups) before any component is built. Inside ``keep_processes_warm()``, a run that ends
cleanly closes its components but keeps its ``Scheduler`` (its processes, their groups and CPU
or GPU slots); the next run with the same plan and cluster settings builds its components in
those processes instead of starting new ones. A run that fails, is interrupted or loses a
worker never hands its processes on: they may hold half-done collectives. One scheduler is kept
at a time, and any other scheduler that starts stops it first (its slots are free again).

Components are seeded when they are built, not when their process starts, so a run in warm
processes computes what it would compute in new ones (tests/runners: resumed and unbroken runs
compare bit for bit either way).
"""

from __future__ import annotations

from collections.abc import Iterator
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
    no longer kept), else None (a kept one for another key is stopped)."""
    kept = _state["kept"]
    if kept is None:
        return None
    _state["kept"] = None
    kept_key, scheduler = kept
    if kept_key == key and scheduler.is_alive():
        return scheduler
    scheduler.shutdown()
    return None


def give(key: Any, scheduler: Any) -> bool:
    """Keep ``scheduler`` (its components closed) for the next run of ``key``, if processes
    are kept warm (True); an earlier kept one is stopped."""
    if not enabled():
        return False
    release()
    _state["kept"] = (key, scheduler)
    return True


def release(unless: Any = None) -> None:
    """Stop the kept scheduler, unless it is ``unless`` (a scheduler starting: its slots)."""
    kept = _state["kept"]
    if kept is not None and kept[1] is not unless:
        _state["kept"] = None
        kept[1].shutdown()
