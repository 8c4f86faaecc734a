"""Joining cluster.address has a deadline: nothing listening there is refused in one line, and a
SIGTERM while Ray's own (C++) join retries ends the process at once."""

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlcore.scheduler.join import JoinError, join
from tests import forked

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_join_where_nothing_listens_is_refused_in_one_line_within_the_deadline():
    port = free_port()
    start = time.monotonic()

    def init(address):
        raise AssertionError("Ray's join must not start: nothing listens")

    with pytest.raises(JoinError) as refused:
        join(f"127.0.0.1:{port}", 1.5, init)
    assert 1.5 <= time.monotonic() - start < 5
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"cluster.address: nothing answers at 127.0.0.1:{port} (")
    assert "after 1.5 s; start the cluster there with `ray start --head`" in message


def test_an_auto_address_without_a_cluster_is_refused(monkeypatch, tmp_path):
    """``auto`` with no RAY_ADDRESS and no `ray start` recorded: one line, before any wait."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    from ray._private import services

    monkeypatch.setattr(services, "get_ray_address_from_environment", lambda *a: None)
    with pytest.raises(JoinError, match=r"^cluster.address: 'auto' names no running Ray cluster"):
        join("auto", 30, lambda address: None)


# Something accepts connections on the port but never answers as a GCS: Ray's join then retries
# in C++ with the main thread blocked, where no Python signal handler runs.
SILENT_JOIN = """
import socket, sys
from rlcore.scheduler.join import join
import ray
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(16)
print("listening", flush=True)
join(f"127.0.0.1:{listener.getsockname()[1]}", float(sys.argv[1]), lambda a: ray.init(address=a))
print("joined", flush=True)
"""


def silent_join(timeout_s: float) -> forked.Popen:
    process = forked.Popen(
        [sys.executable, "-c", SILENT_JOIN, str(timeout_s)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout.readline() == "listening\n"
    return process


def test_sigterm_while_ray_retries_the_join_ends_the_process_in_one_line():
    process = silent_join(timeout_s=120)
    try:
        time.sleep(3.0)  # (ray imported and its C++ join retrying: the port answers)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=10)
    finally:
        process.kill()
    assert process.returncode == 128 + signal.SIGTERM
    ours = [line for line in err.splitlines() if line.startswith("rlcore:")]
    assert len(ours) == 1 and ours[0].startswith("rlcore: stopped by SIGTERM while joining")
    assert "Traceback" not in err


def test_a_port_that_never_answers_as_ray_ends_the_join_at_the_deadline():
    start = time.monotonic()
    process = silent_join(timeout_s=3)
    try:
        _, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 2
    assert time.monotonic() - start < 20
    ours = [line for line in err.splitlines() if line.startswith("rlcore:")]
    assert len(ours) == 1
    assert "did not answer as a Ray cluster within" in ours[0]
    assert "Traceback" not in err


def test_a_local_ray_start_under_a_small_file_size_limit_is_refused_in_one_line(monkeypatch):
    """Ray's object store is a file of 30% of the memory: under a smaller ``ulimit -f`` its
    node fails after a 30 s wait with a traceback, so the start is refused first."""
    import resource

    import psutil

    from rlcore.scheduler.ray_cluster import SchedulerError, check_file_size_limit

    store = int(0.3 * psutil.virtual_memory().total)
    for soft in (resource.RLIM_INFINITY, store + 1):
        monkeypatch.setattr(resource, "getrlimit", lambda which, soft=soft: (soft, soft))
        check_file_size_limit()  # (no limit, or one the store fits under)
    monkeypatch.setattr(resource, "getrlimit", lambda which: (2 << 20, resource.RLIM_INFINITY))
    with pytest.raises(SchedulerError) as refused:
        check_file_size_limit()
    message = str(refused.value)
    assert "file-size limit (2048 KiB, ulimit -f)" in message and "\n" not in message
    assert "ulimit -f unlimited" in message
