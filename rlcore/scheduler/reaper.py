"""Stops a local Ray's processes when the driver that started them dies without shutting it down.

``ray.shutdown()`` stops a local Ray, and Ray's GCS and raylet share the driver's fate. A driver
killed with SIGKILL runs no code, though, and the raylet's agents (dashboard agent, runtime-env
agent) then outlive it by a minute: each notices its raylet is gone, then waits 60 s trying to
tell the dead GCS. ``start`` launches this file as a small watcher that holds a pipe from the
driver: when the pipe closes (the driver exited, however it ended) and the Ray processes of this
run are still there after a grace period, it kills them. It is run as a script that imports
psutil and ``processes.py`` only (no torch), ignores Ctrl-C (the driver's own clean-up runs then),
and knows a process by its pid and start time, so a reused pid is never touched.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time

from rlcore.scheduler.processes import children, command_line, identity, with_environment

GRACE_S = 3.0


def ray_processes(driver_pid: int) -> tuple[int | None, list[int]]:
    """The raylet among the driver's children, and every Ray process the driver started."""
    started = children(driver_pid)
    raylets = [pid for pid in started if "/raylet/raylet" in command_line(pid).split(" ")[0]]
    return (raylets[0] if raylets else None), started


def start(driver_pid: int) -> subprocess.Popen | None:
    """The watcher of the Ray this driver just started; None when it has no raylet child."""
    raylet, started = ray_processes(driver_pid)
    if raylet is None:
        return None
    known = [i for i in map(identity, started) if i is not None]
    return subprocess.Popen(
        [sys.executable, __file__, str(identity(raylet)), *known],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        start_new_session=True,  # not in the driver's process group: a Ctrl-C does not reach it
    )


def stop(watcher: subprocess.Popen) -> None:
    """The driver shut its Ray down itself: let the watcher go (it finds nothing to kill)."""
    if watcher.stdin is not None:
        watcher.stdin.close()
    try:
        watcher.wait(timeout=GRACE_S + 10)
    except subprocess.TimeoutExpired:
        watcher.kill()


def _watch(raylet: str, known: list[str]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raylet_pid = int(raylet.split(":")[0])
    known = list(known)
    # Until the driver closes the pipe (or dies), remember each process the raylet starts: the
    # agents rename themselves, which can wipe the RAY_RAYLET_PID mark from their environment.
    while True:
        ready, _, _ = select.select([sys.stdin], [], [], 1.0)
        if identity(raylet_pid) == raylet:
            for pid in children(raylet_pid):
                mark = identity(pid)
                if mark is not None and mark not in known:
                    known.append(mark)
        if ready and not os.read(sys.stdin.fileno(), 4096):
            break
    deadline = time.monotonic() + GRACE_S
    while True:
        alive = {int(i.split(":")[0]) for i in known if identity(int(i.split(":")[0])) == i}
        if identity(raylet_pid) in (None, raylet):  # its pid not yet taken by another process
            marked = with_environment("RAY_RAYLET_PID", str(raylet_pid))
            alive.update(p for p in marked if identity(p) is not None)
        alive.discard(os.getpid())
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":
    _watch(sys.argv[1], sys.argv[2:])
