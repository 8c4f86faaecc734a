"""The Ray workers of the tests' own clusters, forked from a process that imported torch and
the rest once, instead of started afresh.

A Ray worker that a raylet starts runs Ray's ``setup_worker.py``, which execs the interpreter
again on ``default_worker.py``; the worker then imports Ray, and the rlcore worker it hosts
imports torch, transformers and the rest (about 2 CPU-s on these 2 cores before it does any
work; the suite starts about 60). The clusters the tests start (tests/conftest.py's session
Ray, tests/quiet_ray.py's multi-node ones) name this file as their raylets'
``setup_worker_path``. Run by a raylet with the arguments it gives ``setup_worker.py``, it asks
the launch process of the pytest worker that started the cluster (``serve``; its socket is
named by ``LAUNCH_ENV`` in the raylet's environment) to fork ``default_worker.py`` with this
process's arguments, environment (the runtime environment's variables added, as Ray's setup
adds them), working folder, standard streams and ignored signals, and then stands for it: it
passes on the signals that end a process and ends as the worker ends (its exit status, or
killed by the same signal). The worker registers with its raylet under its own pid (a raylet
knows a starting worker by its startup token and signals the pid that registered); killing
this process (as a raylet does to a worker that never registers) kills the worker too.

The launch process is a new interpreter that imports ``PRELOAD`` once (torch and the libraries
and rlcore modules a worker imports, never Ray: Ray's C++ core reads its settings from the
environment, the worker's job id among them, when it is loaded, so each worker loads it
itself) and forks each worker; it runs no torch operation and starts no thread. A child is set
up as tests/forked.py sets up a new process, and falls back to Ray's own way (its
``setup_worker.py`` exec'd in place, with the same arguments) for what a fork could not
reproduce: a runtime environment that wraps the command or names another interpreter or entry
point, interpreter options, no launch process, or an environment that changes a variable read
when the preloaded modules were imported (tests/forked.py's rule; Ray's own variables are not
among them here). ``OMP_NUM_THREADS``: the launch process imports torch under 1, as Ray sets it
for a worker of at most one CPU before anything imports torch; a worker whose environment or
Ray (for a worker of more CPUs) says another number gets torch's threads set to it, as a new
process would have them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import sys
from collections.abc import Iterator
from typing import Any

LAUNCH_ENV = "RLCORE_TESTS_RAY_LAUNCH"  # the launch socket, in the raylet's environment
THREADS_ENV = "OMP_NUM_THREADS"
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
# the signals whose being ignored a new process inherits from the raylet (tests/forked.py's)
INHERITED = (*FORWARDED, signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM, signal.SIGCHLD)

# what a worker of the suite's runs imports, bar Ray (those installed), and not Megatron: no run
# on a Ray worker here trains with it (the placement refuses it on CPU slots), and its import is
# 3.2 CPU-s of this process's 8.9
PRELOAD = (
    "torch",
    "torch.distributed",
    "torch._dynamo",
    "torch.distributed.checkpoint",
    "transformers",
    "gymnasium",
    "tensordict",
    "rlcore.scheduler.worker",
    "rlcore.runners.embodied",
    "rlcore.runners.reasoning",
    "rlcore.workers.reasoning.lm_actor",
    "rlcore.workers.embodied.embodied_actor",
    # what Ray's own import takes from elsewhere (0.1 of its 0.3 CPU-s once the rest is in)
    "jsonschema",
    "requests",
    "psutil",
    "msgpack",
)


# ---- the process a raylet starts ---------------------------------------------------------


def _ray_setup_worker() -> str:
    """Ray's own ``setup_worker.py`` (found by path: importing Ray here would cost what this
    file saves)."""
    from importlib.util import find_spec

    spec = find_spec("ray")
    return os.path.join(os.path.dirname(spec.origin), "_private", "workers", "setup_worker.py")


def _as_ray_does() -> None:
    os.execv(sys.executable, [sys.executable, _ray_setup_worker(), *sys.argv[1:]])


def _request() -> dict | None:
    """What to ask the launch process to fork; None where Ray's own way must run it."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--serialized-runtime-env-context", type=str)
    parser.add_argument("--language", type=str)
    args, rest = parser.parse_known_args(sys.argv[1:])
    context = json.loads(args.serialized_runtime_env_context or "{}")
    plain = (
        args.language == "PYTHON"
        and not context.get("command_prefix")
        and context.get("py_executable") in (None, sys.executable)
        and not context.get("override_worker_entrypoint")
        and not context.get("java_jars")
        and rest
        and not rest[0].startswith("-")
        and os.path.basename(rest[0]) == "default_worker.py"
    )
    added = context.get("env_vars") or {}
    if not plain or any("$" in str(v) for v in added.values()) or not os.environ.get(LAUNCH_ENV):
        return None
    env = dict(os.environ)
    env.update({k: str(v) for k, v in added.items()})
    ignored = [int(s) for s in INHERITED if signal.getsignal(s) == signal.SIG_IGN]
    return {"argv": rest, "env": env, "cwd": os.getcwd(), "ignored": ignored}


def _client() -> None:
    request = _request()
    if request is None:
        _as_ray_does()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(os.environ[LAUNCH_ENV])
        socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], [0, 1, 2])
        reader = conn.makefile("r")
        reply = json.loads(reader.readline() or "{}")
    except OSError:
        reply = {}
    if "pid" not in reply:
        conn.close()
        _as_ray_does()
    pid = reply["pid"]

    def forward(signum, frame):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    for sig in FORWARDED:
        signal.signal(sig, forward)
    line = reader.readline()
    status = json.loads(line)["status"] if line else 1
    if status < 0:  # killed by a signal: so is this process
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    sys.exit(status)


# ---- the forked worker -------------------------------------------------------------------


def _run_worker() -> None:
    """In the forked child: torch's threads as a new process would have them, then Ray's
    ``default_worker.py`` as its own main module."""
    import runpy

    script = sys.argv[2]
    sys.argv = sys.argv[2:]
    sys.path[0] = os.path.dirname(script)  # (before Ray's import puts its own folder first)
    import torch

    def follow(threads: str | None) -> None:
        wanted = int(threads) if threads and threads.isdigit() else 0
        if wanted > 0 and torch.get_num_threads() != wanted:
            torch.set_num_threads(wanted)

    follow(os.environ.get(THREADS_ENV))
    # Ray sets the variable for a worker that has none, once it knows its CPUs: a new process
    # imports torch after that
    from ray._private import utils

    ray_sets = utils.set_omp_num_threads_if_unset

    def set_omp_num_threads_if_unset() -> bool:
        changed = ray_sets()
        follow(os.environ.get(THREADS_ENV))
        return changed

    utils.set_omp_num_threads_if_unset = set_omp_num_threads_if_unset
    runpy.run_path(script, run_name="__main__")


# ---- the launch process and the pytest worker's side ---------------------------------------

_service: dict[str, Any] = {}


def serve() -> str:
    """This pytest worker's launch socket, its launch process started on first call (it ends
    when this process does: it reads the end of a pipe that only this process holds)."""
    if "path" not in _service:
        import atexit
        import shutil
        import subprocess
        import tempfile

        folder = tempfile.mkdtemp(prefix="rlcore-ray-launch-")
        atexit.register(shutil.rmtree, folder, True)  # (the socket and the launcher's log)
        path = os.path.join(folder, "socket")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(64)
        # its output to a file of its own: it holds no stream of this process, whose end the
        # pytest-xdist controller waits for (its workers' are the controller's channel)
        with open(os.path.join(folder, "launcher.log"), "wb") as log:
            process = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--launcher", str(listener.fileno())],
                pass_fds=(listener.fileno(),),
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=log,
                env={**os.environ, THREADS_ENV: "1"},
                start_new_session=True,  # (a Ctrl-C to the pytest worker's group: by its pipe)
            )
        listener.close()
        _service.update(path=path, process=process)
    return _service["path"]


@contextlib.contextmanager
def launching() -> Iterator[dict[str, str]]:
    """Inside: the raylet arguments that launch a cluster's workers through ``serve``, the
    socket named in this process's environment for the raylets started here to inherit
    (RLCORE_TESTS_RAY_FRESH=1: none, every worker started as Ray starts it, to compare)."""
    if os.environ.get("RLCORE_TESTS_RAY_FRESH"):
        yield {}
        return
    os.environ[LAUNCH_ENV] = serve()
    try:
        yield {"setup_worker_path": os.path.abspath(__file__)}
    finally:
        os.environ.pop(LAUNCH_ENV, None)


def _launcher(listener_fd: int) -> None:
    """The launch process: import ``PRELOAD``, then fork a worker for each request, one at a
    time (a fork takes milliseconds), and tell each asking process how its worker ended."""
    import select
    from importlib.util import find_spec

    before = dict(os.environ)
    for name in PRELOAD:
        if find_spec(name.split(".")[0]) is not None:
            __import__(name)
    from tests import forked

    forked._server["env"] = dict(os.environ)
    forked._server["added"] = {k: v for k, v in os.environ.items() if k not in before}
    forked._interpreter_path(before)
    # what a worker's environment may change: Ray's variables where Ray is not imported here
    # (it never is, PRELOAD being what it is), and the threads, followed in the child
    ray_here = "ray._raylet" in sys.modules
    read_on_import = tuple(p for p in forked.IMPORT_TIME_ENV if ray_here or p != "RAY_")
    read_later = (*forked.RUN_TIME_ENV, THREADS_ENV)
    listener = socket.socket(fileno=listener_fd)
    alive = sys.stdin.fileno()
    asking: dict[int, socket.socket] = {}  # child pid -> the connection of the process that asked
    while True:
        readable, _, _ = select.select([listener, alive, *asking.values()], [], [], 0.2)
        if alive in readable:  # the pytest worker is gone: so is this, without a teardown
            os._exit(0)
        if listener in readable:
            conn, _ = listener.accept()
            pid = _fork(conn, listener, asking, read_on_import, read_later)
            if pid is None:
                conn.close()
            else:
                asking[pid] = conn
        for pid, conn in list(asking.items()):
            if conn in readable and not conn.recv(1):  # the raylet's process is gone: so is this
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        while asking:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = asking.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    end = {"status": os.waitstatus_to_exitcode(status)}
                    conn.sendall(json.dumps(end).encode() + b"\n")
                conn.close()


def _fork(
    conn: socket.socket,
    listener: socket.socket,
    asking: dict,
    read_on_import: tuple[str, ...],
    read_later: tuple[str, ...],
) -> int | None:
    """The forked worker's pid, the asking process told it; None where that process is to run
    Ray's own way (told so): tests/forked.py's rule, with what ``_launcher`` says is read when."""
    from tests import forked

    fds: list[int] = []
    try:
        conn.settimeout(10)
        data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        while not data.endswith(b"\n"):
            more = conn.recv(1 << 20)
            if not more:
                return None
            data += more
        conn.settimeout(None)
        request = json.loads(data)
        env, cwd = request["env"], request["cwd"]
        if len(fds) != 3 or not forked._forkable(env, cwd, read_on_import, read_later):
            conn.sendall(b"{}\n")
            return None
        argv = [sys.executable, os.path.abspath(__file__), "--run-worker", *request["argv"]]
        spec = forked.child_spec(argv, cwd=cwd, env=env, start_new_session=True)
        spec.ignored = list(request["ignored"])
        pid = os.fork()
        if pid == 0:
            try:
                listener.close()
                for other in (conn, *asking.values()):
                    other.close()
                forked._child(spec, *fds)
            finally:
                os._exit(1)
        conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        return pid
    except (OSError, ValueError):
        return None
    finally:
        for fd in fds:
            os.close(fd)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--run-worker"]:
        _run_worker()
    elif sys.argv[1:2] == ["--launcher"]:
        sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        _launcher(int(sys.argv[2]))
    else:
        _client()
