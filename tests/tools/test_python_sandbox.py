"""The python tool's sandbox, attacked from inside and checked from outside: a planted file is
not read, host files are not written, truncated or created, no process outlives a call or
signals a host process, no connection leaves it, an output flood does not grow the caller, a
fork bomb stops at the process limit, and where bwrap cannot make namespaces the run is refused
before it starts, naming the fix."""

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from rlcore.config.errors import ConfigError
from rlcore.placement import plan_for_config
from rlcore.runners.preflight import preflight
from rlcore.tools import sandbox
from rlcore.tools.calls import Call
from rlcore.tools.pool import ToolPool
from rlcore.tools.python import PythonInterpreter, ToolError, check_sandbox
from tests.lm_fixtures import tiny_config


class Quick(PythonInterpreter):
    timeout_s = 3.0


def attempt(code: str, tool: PythonInterpreter | None = None) -> str:
    """What the model reads back: the output, or the error."""
    try:
        return (tool or Quick()).call({"code": code})
    except ToolError as error:
        return f"error: {error}"


def processes_with(marker: str) -> list[int]:
    """Host pids whose command line holds ``marker`` (read from the host's /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                pass
    return found


def test_a_snippet_runs_with_the_standard_library_and_its_own_folder():
    code = "import json, sqlite3\nopen('a.txt', 'w').write('ok')\nprint(json.dumps([6 * 7]))"
    assert attempt(code) == "[42]\n"
    assert attempt("import os; print(os.getcwd(), os.environ['HOME'])") == "/tmp /tmp\n"
    assert "No module named 'jsonschema'" in attempt("import jsonschema")  # the venv is not seen


def test_a_planted_file_outside_is_not_read(tmp_path):
    secret = uuid.uuid4().hex
    planted = tmp_path / "planted.txt"
    planted.write_text(secret)
    code = f"""
for path in ({str(planted)!r}, '/proc/1/root' + {str(planted)!r}, '/etc/hostname'):
    try:
        print(open(path).read())
    except OSError as error:
        print(type(error).__name__)
print(sorted(__import__('os').listdir('/')))
"""
    said = attempt(code)
    assert secret not in said
    assert "'etc'" not in said and "'work'" not in said and "'home'" not in said


WRITES = {
    "open": "open(KEEP, 'w').write('gone')",
    "os.open": "import os; os.close(os.open(KEEP, os.O_WRONLY | os.O_TRUNC))",
    "truncate": "import os; os.truncate(KEEP, 0)",
    "pathlib": "import pathlib; pathlib.Path(NEW).write_text('x')",
    "sqlite3": "import sqlite3; sqlite3.connect(NEW).execute('create table t (x)')",
    "mkfifo": "import os; os.mkfifo(NEW)",
    "makedirs": "import os; os.makedirs(os.path.dirname(NEW), exist_ok=True); open(NEW, 'w')",
}


@pytest.mark.parametrize("how", WRITES)
def test_files_outside_are_not_written_truncated_or_created(tmp_path, how):
    keep, new = tmp_path / "keep.txt", tmp_path / "new"
    keep.write_text("original")
    attempt(f"KEEP, NEW = {str(keep)!r}, {str(new)!r}\n" + WRITES[how])
    assert keep.read_text() == "original"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]


def test_the_process_scan_sees_a_marked_process():
    """The check the next tests rely on can fail: a marked host process is found."""
    marker = uuid.uuid4().hex
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", marker])
    try:
        waited = time.monotonic() + 10
        while not processes_with(marker) and time.monotonic() < waited:
            time.sleep(0.02)  # until it has exec'd
        assert processes_with(marker) == [sleeper.pid]
    finally:
        sleeper.kill()
        sleeper.wait()


def spawner(marker: str, outside: Path, then: str) -> str:
    """A snippet that leaves marked processes every way it can, writes outside, then ``then``."""
    return f"""
import multiprocessing, os, subprocess, sys
SLEEP = [sys.executable, '-c', 'import time; time.sleep(30)', {marker!r}]
subprocess.Popen(SLEEP, start_new_session=True)
if os.fork() == 0:  # a daemon: double fork, new session
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, SLEEP)
    os._exit(0)
os.system('(sleep 30; echo {marker}) > /dev/null 2>&1 &')
context = multiprocessing.get_context('spawn')
child = context.Process(target=open, args=({str(outside)!r}, 'w'), daemon=True)
child.start()
child.join()
def marked():  # this sandbox's processes that have exec'd with the marker
    found = 0
    for entry in filter(str.isdigit, os.listdir('/proc')):
        try:
            found += {marker!r}.encode() in open(f'/proc/{{entry}}/cmdline', 'rb').read()
        except OSError:
            pass
    return found
for _ in range(500):
    if marked() >= 3:
        print('spawned')
        break
    __import__('time').sleep(0.01)
{then}
"""


@pytest.mark.parametrize("then", ["pass", "while True: pass"])
def test_no_process_outlives_a_call_ended_or_past_its_deadline(tmp_path, then):
    marker, outside = uuid.uuid4().hex, tmp_path / "from_a_child"
    started = time.monotonic()
    said = attempt(spawner(marker, outside, then))
    assert ("timed out after 3 s" in said) == (then != "pass"), said
    assert "spawned" in said and time.monotonic() - started < 10
    assert processes_with(marker) == []
    assert not outside.exists()


def test_a_tool_process_killed_at_the_pools_deadline_takes_its_sandbox_along(tmp_path):
    (tmp_path / "slow.py").write_text(
        "from rlcore.tools.python import PythonInterpreter\n"
        "class Slow(PythonInterpreter):\n    timeout_s = 60.0\n"
    )
    marker = uuid.uuid4().hex
    pool = ToolPool((f"{tmp_path}/slow.py:Slow",), None, processes=1, timeout_s=2.0)
    try:
        code = spawner(marker, tmp_path / "from_a_child", "while True: pass")
        (result,) = pool.call([Call("python", {"code": code})])
        assert result.timed_out
        waited = time.monotonic() + 5
        while processes_with(marker) and time.monotonic() < waited:
            time.sleep(0.05)  # the parent-death signal reaches the sandbox as its parent dies
        assert processes_with(marker) == []
    finally:
        pool.close()


def test_host_processes_are_not_signalled(tmp_path):
    received = []
    previous = signal.signal(signal.SIGUSR1, lambda *_: received.append(1))
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        code = f"""
import os, signal
for pid in ({os.getpid()}, {sleeper.pid}):
    for send in (lambda: os.kill(pid, signal.SIGUSR1 if pid == {os.getpid()} else signal.SIGKILL),
                 lambda: signal.pidfd_send_signal(os.pidfd_open(pid), signal.SIGKILL)):
        try:
            send()
        except OSError as error:
            print(type(error).__name__)
"""
        attempt(code)
        time.sleep(0.2)
        assert sleeper.poll() is None and received == []
    finally:
        signal.signal(signal.SIGUSR1, previous)
        sleeper.kill()
        sleeper.wait()


def test_no_connection_leaves_the_sandbox():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        said = attempt(f"import socket; socket.create_connection(('127.0.0.1', {port}), 1)")
        assert "ConnectionRefusedError" in said  # its own loopback, where nothing listens
        listener.settimeout(0.3)
        with pytest.raises(TimeoutError):
            listener.accept()


def peak_rss_kib() -> int:
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmHWM:")[1].split()[0])


def test_an_output_flood_is_cut_at_the_source():
    Path("/proc/self/clear_refs").write_text("5")  # resets the peak (VmHWM) to the current RSS
    before = peak_rss_kib()
    started = time.monotonic()
    flood = "import sys\nline = 'x' * (1 << 20)\nfor _ in range(200):\n    sys.stdout.write(line)"
    said = Quick().call({"code": flood})
    assert time.monotonic() - started < Quick.timeout_s
    cap = Quick.max_output_chars
    assert said == "x" * cap + f"\n[output cut at {cap} characters; the snippet was stopped]"
    assert peak_rss_kib() - before < 50 << 10  # 200 MB printed; under 50 MB more at the peak


def test_a_fork_bomb_stops_at_the_process_limit():
    code = """
import os, time
n = 0
try:
    for _ in range(200):
        if os.fork() == 0:
            time.sleep(5)
            os._exit(0)
        n += 1
except OSError as error:
    print(n, error.strerror)
"""
    count, why = attempt(code).split(" ", 1)
    # The launcher (and, where bwrap's pid 1 runs as the same user, that too) counts.
    assert Quick.max_processes - 2 <= int(count) < Quick.max_processes
    assert why.strip() == "Resource temporarily unavailable"


def test_a_limit_past_its_bound_is_refused_inside():
    said = attempt("import resource; resource.setrlimit(resource.RLIMIT_NPROC, (10**6, 10**6))")
    assert "ValueError: not allowed to raise maximum limit" in said


@pytest.fixture
def fresh_probe():
    sandbox.sandbox_problem.cache_clear()
    yield
    sandbox.sandbox_problem.cache_clear()


def test_a_kernel_without_user_namespaces_is_refused_before_the_run(
    tmp_path, monkeypatch, fresh_probe
):
    config = tiny_config(tmp_path, tmp_path, "rollout.tools=[calculator,python]", "warmup.steps=0")
    preflight(config, plan_for_config(config))  # here the sandbox runs: accepted
    sandbox.sandbox_problem.cache_clear()
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sandbox, "find_bwrap", lambda: str(fake))
    with pytest.raises(ConfigError) as error:
        check_sandbox()
    message = str(error.value)
    assert len(message.splitlines()) == 1
    assert "setting up uid map: Permission denied" in message
    assert "kernel.unprivileged_userns_clone=1" in message
    with pytest.raises(ConfigError, match=r"python: the tool's sandbox \(bwrap\) cannot start"):
        preflight(config, plan_for_config(config))
    monkeypatch.setattr(sandbox, "find_bwrap", lambda: None)
    sandbox.sandbox_problem.cache_clear()
    with pytest.raises(ConfigError, match="apt-get install bubblewrap"):
        check_sandbox()
