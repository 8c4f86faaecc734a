"""Join a running Ray cluster (``cluster.address``) within a deadline, and let SIGTERM end the join.

``ray.init(address=...)`` retries a GCS that does not answer forever, in C++, with the main
thread blocked: Python signal handlers (Ray's own SIGTERM handler among them) never run, so the
process ignores SIGTERM as well. ``join`` first knocks at the GCS port from Python, a second at a
time, until ``timeout_s``: nothing listening there is a one-line ``ConfigError`` naming the
address, and a signal in that time is handled as anywhere else. Once the port answers,
``ray.init`` runs with a guard thread that hears signals through Python's wakeup fd (written by
the C-level handler even while the main thread is blocked): a SIGTERM, SIGHUP or Ctrl-C, or the
deadline passing, is said in one line and ends the process, as nothing else could unblock it.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator

from rlcore.config.errors import ConfigError

# How long each knock at the GCS port may take (a host that drops packets answers nothing).
KNOCK_S = 1.0
# How long a join may take in all (a cluster started with `ray start` answers in a second).
JOIN_TIMEOUT_S = 30.0


class JoinError(ConfigError):
    """Nothing answered at ``cluster.address`` within the join's deadline."""


def gcs_address(address: str) -> str:
    """``host:port`` of the GCS that ``address`` (``auto`` or ``host:port``) names, as Ray
    resolves it (``auto``: RAY_ADDRESS or the newest ``ray start`` on this machine)."""
    from ray._private.services import canonicalize_bootstrap_address

    from rlcore.scheduler.network import local_ray_node

    try:
        with local_ray_node():  # 127.0.0.1 stays loopback instead of this machine's address
            resolved = canonicalize_bootstrap_address(address)
    except (ValueError, ConnectionError) as error:
        raise JoinError(f"cluster.address: '{address}': {error}") from None
    if resolved is None:
        raise JoinError(
            f"cluster.address: '{address}' names no running Ray cluster (no RAY_ADDRESS, no "
            "`ray start` on this machine); start one with `ray start --head`, give its "
            "host:port, or set cluster.address=null for a local Ray"
        )
    return resolved


def wait_for_port(address: str, timeout_s: float, knock_s: float = KNOCK_S) -> None:
    """Return once ``host:port`` accepts a TCP connection; ``JoinError`` after ``timeout_s``."""
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        try:
            knock = max(0.05, min(knock_s, left))
            with socket.create_connection((host.strip("[]"), int(port)), knock):
                return
        except OSError as error:
            reason = error.strerror or type(error).__name__
        left = deadline - time.monotonic()
        if left <= 0:
            raise JoinError(
                f"cluster.address: nothing answers at {address} ({reason}) after "
                f"{timeout_s:g} s; start the cluster there with `ray start --head`, or fix the "
                "address"
            )
        time.sleep(min(0.25, left))


def join(address: str, timeout_s: float, init: Callable[[str], None]) -> None:
    """``init(address)`` (a ``ray.init`` that joins it) once the GCS port it names answers,
    within ``timeout_s`` in all; see the module docstring. (``address`` itself, not the
    ``host:port`` it resolves to: for ``auto``, Ray also finds the cluster's credentials.)"""
    from rlcore.scheduler.network import local_ray_node

    resolved = gcs_address(address)
    started = time.monotonic()
    wait_for_port(resolved, timeout_s)
    left = max(1.0, timeout_s - (time.monotonic() - started))
    loopback = resolved.startswith(("127.", "localhost", "[::1]"))
    with local_ray_node() if loopback else contextlib.nullcontext(), _guard(resolved, left):
        init(address)


@contextlib.contextmanager
def _guard(address: str, timeout_s: float) -> Iterator[None]:
    """While the block runs, a signal or the deadline ends the process in one line."""
    if threading.current_thread() is not threading.main_thread():
        yield  # (set_wakeup_fd is the main thread's; a join in a thread keeps Ray's behaviour)
        return
    read, write = os.pipe()
    os.set_blocking(write, False)
    previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    done = threading.Event()
    watcher = threading.Thread(
        target=_watch, args=(read, done, address, timeout_s), name="rlcore-join", daemon=True
    )
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
        signal.set_wakeup_fd(previous)
        os.close(read)
        os.close(write)


def _watch(read: int, done: threading.Event, address: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    ending = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    while not done.is_set():
        ready, _, _ = select.select([read], [], [], 0.1)
        heard = os.read(read, 64) if ready else b""
        for number in heard:
            if number in ending:
                _end(
                    f"rlcore: stopped by {signal.Signals(number).name} while joining the Ray "
                    f"cluster at {address}",
                    128 + number,
                )
        if time.monotonic() > deadline and not done.is_set():
            _end(
                f"rlcore: config error: cluster.address: {address} accepts connections but did "
                f"not answer as a Ray cluster within {timeout_s:g} s; check that it is the "
                "address of a Ray head (`ray status --address ADDRESS`)",
                2,
            )


def _end(line: str, status: int) -> None:
    """The main thread is blocked in Ray's C++ retry loop: say why, and end the process."""
    print(line, file=sys.stderr, flush=True)
    os._exit(status)
