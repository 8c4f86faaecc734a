"""A watchdog for code stuck in C, and the line the driver says when it fires.

A timer signal interrupts Python code, but a C routine that holds the GIL (a huge integer power, a
simulator's solver loop) runs until it returns: ``env.step_timeout_s`` cannot stop it. ``watch``
arms ``faulthandler``'s watchdog, a C thread that needs no GIL: past its limit it writes the
process's Python stacks and ends the process (exit status 1).

A worker process started by the scheduler writes them to its *last-words file*
(``<LAST_WORDS_ENV dir>/<pid>.txt``, the folder made by the driver and removed at shutdown); the
driver's account of a lost process (``Scheduler.dead_processes``) then reads it and says in one
line that the watchdog ended the process, after how long and at which frame (``account``). In
the driver's own process (no such folder, envs stepped in the driver) nothing is left to say it
once the watchdog fires, so they go to a small watcher process started with the first watch
(this file run as a script, standard library only): when the driver's pipe closes, it says the
same line on stderr, naming what was stuck (``watch``'s ``who``), instead of 30 lines of stacks.
The driver's exit status is faulthandler's, 1.
"""

from __future__ import annotations

import faulthandler
import os
import re
import signal
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

LAST_WORDS_ENV = "RLCORE_LAST_WORDS_DIR"

_file: IO[str] | None = None


# The watchdog of a call limited to timeout_s by a timer signal fires this much later (at least),
# so that the signal, which ends the call in one line and keeps the process, goes first.
WATCHDOG_GRACE_S = 5.0


def watchdog_s(timeout_s: float) -> float:
    """When the watchdog fires for a call limited to ``timeout_s`` by a timer signal."""
    return timeout_s + max(WATCHDOG_GRACE_S, timeout_s)


@contextmanager
def watch(after_s: float, who: str | None = None) -> Iterator[None]:
    """Run the block under a watchdog that ends this process if the block is still running
    after ``after_s`` seconds (see the module docstring); ``who`` names what runs in it (``env
    'CartPole-v1' rank 0``) in the driver's line."""
    output = _output()
    if who is not None and output is _watcher_pipe and who != _said["who"]:
        _said["who"] = who
        output.write(f"{WHO}{who}\n")
        output.flush()
    faulthandler.dump_traceback_later(after_s, exit=True, file=output)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def _output() -> IO[str]:
    global _file
    if _file is not None:  # (asked at every env step: no lookup once open)
        return _file
    folder = os.environ.get(LAST_WORDS_ENV)
    if not folder or not Path(folder).is_dir():
        _file = _start_watcher(worker=folder is not None) or sys.stderr
        return _file
    _file = open(Path(folder) / f"{os.getpid()}.txt", "w")  # noqa: SIM115 (kept open)
    return _file


WHO = "rlcore-who: "  # a line of the driver's pipe naming what runs under the watchdog
_watcher_pipe: IO[str] | None = None
_said: dict[str, str | None] = {"who": None}


def _start_watcher(worker: bool) -> IO[str] | None:
    """The pipe to this process's watcher (see the module docstring); None if it cannot start."""
    global _watcher_pipe
    try:
        watcher = subprocess.Popen(
            # (a worker whose last-words folder is on another node says it on its own stderr,
            # which Ray passes on to the driver's)
            [sys.executable, __file__, str(os.getpid()), "worker" if worker else "driver"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C to the driver's group does not reach it
            text=True,
        )
    except OSError:
        return None
    _watcher_pipe = watcher.stdin
    return _watcher_pipe


# faulthandler's words: "Timeout (0:00:10)!", then each thread's frames, innermost first.
_HEADER = re.compile(r"Timeout \((\d+):(\d\d):(\d\d(?:\.\d+)?)\)!")
_FRAME = re.compile(r'File "([^"]+)", line (\d+) in (\S+)')


# rlcore's own source folder, and frames that are not the user's code: rlcore's, and the
# standard library's and installed packages' (gymnasium, numpy).
RLCORE_SOURCE = os.path.join(str(Path(__file__).parents[1]), "")
NOT_USER_CODE = tuple(
    os.path.join(path, "")
    for path in sorted(
        {RLCORE_SOURCE.rstrip(os.sep)}
        | {sysconfig.get_paths()[k] for k in ("stdlib", "purelib", "platlib")}
    )
)


def account(folder: str | Path | None, pid: int, here: bool = True) -> str | None:
    """One line on how process ``pid`` ended, if its watchdog ended it (None otherwise, and for
    a process not on this machine, ``here`` False): the limit, and the innermost frame of user
    code in the stuck thread (the thread running through rlcore; the others idle in
    libraries)."""
    if folder is None or not here:
        return None
    try:
        text = (Path(folder) / f"{pid}.txt").read_text(errors="replace")
    except OSError:
        return None
    return account_of(text)


def account_of(text: str) -> str | None:
    """``account``'s line from the words faulthandler wrote (None: no watchdog's words)."""
    header = _HEADER.search(text)
    if header is None:
        return None
    hours, minutes, seconds = (float(g) for g in header.groups())
    limit = round(hours * 3600 + minutes * 60 + seconds, 3)
    threads = [_FRAME.findall(block) for block in text[header.end() :].split("\n\n")]
    threads = [frames for frames in threads if frames] or [[]]
    frames = next(
        (t for t in threads if any(f[0].startswith(RLCORE_SOURCE) for f in t)), threads[0]
    )
    mine = [f for f in frames if not f[0].startswith(NOT_USER_CODE)] or frames
    where = f" at {mine[0][0]}:{mine[0][1]} in {mine[0][2]}" if mine else ""
    return (
        f"its watchdog ended it: a call was still running after {limit:g} s{where}, in code that "
        "a timeout cannot interrupt (C code holding the GIL); fix that code, or raise the "
        "limit (env.step_timeout_s)"
    )


def _watch_driver(pid: str, role: str) -> None:
    """The watcher's loop: read the driver's pipe to its end; if the watchdog wrote there,
    say so in one line."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    text = sys.stdin.read()
    said = account_of(text)
    if said is None:
        return
    who = [line[len(WHO) :] for line in text.splitlines() if line.startswith(WHO)]
    process = "the driver's process" if role == "driver" else "a worker process"
    named = f"{who[-1]} (in {process}, pid {pid})" if who else f"{process} (pid {pid})"
    print(f"rlcore: error: {named}: {said}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    _watch_driver(sys.argv[1], sys.argv[2])
