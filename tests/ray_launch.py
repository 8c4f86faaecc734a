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

The launch process is forked by the pytest worker's fork server (tests/forked.py) while that
imports its modules, once ``PRELOAD`` is in (torch and the libraries and rlcore modules a worker
imports) and before Ray is: Ray's C++ core reads its settings from the environment, the
worker's job id among them, when it is loaded, so each worker loads it itself. It forks each
worker; it runs no torch operation and starts no thread. A child is set up as tests/forked.py
sets up a new process, and falls back to Ray's own way (its ``setup_worker.py`` exec'd in place,
with the same arguments) for what a fork could not reproduce: a runtime environment that wraps
the command or names another interpreter or entry point, interpreter options, no launch process,
or an environment that changes a variable read when the preloaded modules were imported
(tests/forked.py's rule; Ray's own variables are not among them here). ``OMP_NUM_THREADS``: a
worker whose environment or Ray (which sets 1 for a worker of at most one CPU, before anything
imports torch, and another number for one of more CPUs) says a number gets torch's threads set
to it, as a new process would have them.
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
# on a Ray worker here trains with it (the placement refuses it on CPU slots); the fork server
# imports these (most are its own too), forks the launch process, then imports Megatron and Ray
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


def _folder(pytest_worker: int) -> str:
    """The folder of a pytest worker's launch process: its socket, its pid, its log."""
    import tempfile

    return os.path.join(tempfile.gettempdir(), f"rlcore-ray-launch-{pytest_worker}")


def serve() -> str:
    """This pytest worker's launch socket. The launch process is forked by the worker's fork
    server (tests/forked.py) in the middle of its imports, once ``PRELOAD`` is in and before
    Ray is (``_fork_launcher``): a new interpreter importing the same took 6.9 CPU-s a pytest
    worker. It ends when the fork server does, which ends with the pytest worker."""
    if "path" not in _service:
        import atexit
        import shutil
        from pathlib import Path

        from tests import forked

        folder = _folder(os.getpid())
        forked.server_environment()  # (the server started and its imports done: it forked)
        if not _own_folder(folder):
            raise RuntimeError(f"{folder}: not a folder of this user's alone; no launch socket")
        atexit.register(shutil.rmtree, folder, True)  # (the socket, the pid and the log)
        pid, log = Path(folder, "pid"), Path(folder, "launcher.log")
        if not pid.exists():
            said = log.read_text() if log.exists() else "(no log)"
            raise RuntimeError(f"the fork server started no launch process in {folder}: {said}")
        _service.update(path=os.path.join(folder, "socket"), pid=int(pid.read_text()))
    return _service["path"]


def launcher_pid() -> int:
    """The pid of this pytest worker's launch process (the parent of the workers it forks)."""
    serve()
    return _service["pid"]


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


def _in_fork_server() -> dict[str, Any] | None:
    """The local variables of multiprocessing's fork server's ``main`` where this module is
    imported by it (as one of its preloaded modules), else None."""
    import multiprocessing.forkserver as server

    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is server.main.__code__:
            return frame.f_locals
        frame = frame.f_back
    return None


def _own_folder(folder: str) -> bool:
    """Whether ``folder`` (a name anyone may take in the shared temporary folder) is a folder of
    this user's that no one else may write to: else no launch socket goes there."""
    import stat

    try:
        info = os.lstat(folder)
    except FileNotFoundError:
        return False
    return (
        stat.S_ISDIR(info.st_mode)
        and info.st_uid == os.getuid()
        and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    )


def _fork_launcher() -> None:
    """In a pytest worker's fork server, importing this module (tests/forked.py names it among
    the server's imports, before Ray's): import ``PRELOAD`` (mostly in already), bind the launch
    socket, fork the launch process, write its pid beside the socket and go on with the
    server's imports. Nothing where this module is imported elsewhere, or under
    RLCORE_TESTS_RAY_FRESH=1; where Ray is in already, no launch process (``serve`` says so)."""
    server = _in_fork_server()
    if server is None or os.environ.get("RLCORE_TESTS_RAY_FRESH"):
        return
    from importlib.util import find_spec

    folder = _folder(os.getppid())  # (the server is the pytest worker's child)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    if not _own_folder(folder):
        return
    # what a pytest worker of the same pid left (killed before its exit functions ran): its
    # socket would refuse the bind, its pid name a process long gone
    for name in ("socket", "pid"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(folder, name))
    log = os.open(os.path.join(folder, "launcher.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        if "ray" in sys.modules:
            os.write(log, b"Ray was imported before tests.ray_launch in the fork server\n")
            return
        # the environment before any import: as the pytest worker gave it (proc(5): the file
        # keeps a process's environment as it was at its start)
        with open("/proc/self/environ", "rb") as f:
            items = (item.decode().partition("=") for item in f.read().split(b"\0") if item)
            before = {key: value for key, _, value in items}
        for name in PRELOAD:
            if find_spec(name.split(".")[0]) is not None:
                __import__(name)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(os.path.join(folder, "socket"))
        listener.listen(64)
        pid = os.fork()
        if pid == 0:
            try:
                # none of the server's own descriptors (its clients' socket, the pytest
                # worker's pipe), and a session of its own (a Ctrl-C to the pytest worker's
                # group is not for it); its output to its log: it holds no stream of the pytest
                # worker, whose end the pytest-xdist controller waits for
                for fd in (server.get("listener_fd"), server.get("alive_r")):
                    if isinstance(fd, int):
                        with contextlib.suppress(OSError):
                            os.close(fd)
                os.setsid()
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.dup2(log, 1)
                os.dup2(log, 2)
                os.close(null)  # (not left open in the workers it forks)
                os.close(log)
                _launcher(listener, before, os.getppid(), folder)
            finally:
                os._exit(1)
        listener.close()
        # (read by serve() once the server's imports are done, so never half written)
        with open(os.path.join(folder, "pid"), "w") as f:
            f.write(str(pid))
    except Exception as error:  # (an error here would end the fork server: serve() says it)
        os.write(log, f"{type(error).__name__}: {error}\n".encode())
    finally:
        os.close(log)


def _launcher(listener: socket.socket, before: dict[str, str], parent: int, folder: str) -> None:
    """The launch process: fork a worker for each request, one at a time (a fork takes
    milliseconds), and tell each asking process how its worker ended; end when ``parent`` (the
    fork server) does, removing ``folder`` (a pytest worker that never asked for it has no
    exit function to)."""
    import select
    import shutil

    from tests import forked

    forked._server["env"] = dict(os.environ)
    forked._server["added"] = {k: v for k, v in os.environ.items() if k not in before}
    forked._interpreter_path(before)
    # what a worker's environment may change: Ray's variables where Ray is not imported here
    # (it never is, PRELOAD being what it is), and the threads, followed in the child
    ray_here = "ray._raylet" in sys.modules
    read_on_import = tuple(p for p in forked.IMPORT_TIME_ENV if ray_here or p != "RAY_")
    read_later = (*forked.RUN_TIME_ENV, THREADS_ENV)
    asking: dict[int, socket.socket] = {}  # child pid -> the connection of the process that asked
    while True:
        readable, _, _ = select.select([listener, *asking.values()], [], [], 0.2)
        if os.getppid() != parent:  # the fork server is gone: so is this, without a teardown
            shutil.rmtree(folder, ignore_errors=True)
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
    else:
        _client()
else:
    _fork_launcher()
