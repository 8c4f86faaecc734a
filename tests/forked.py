"""Python processes for the tests, forked from one fork server per pytest worker instead of
started afresh: ``run`` and ``Popen`` take what ``subprocess.run`` and ``subprocess.Popen`` take
for ``[sys.executable, script | -m module | -c code, *args]`` and give what they give (the
exit status, a signal's negative number, the output, the process to signal).

A Python process that runs an entry point first imports torch, Ray, Hydra, gymnasium and rlcore
(2.3-3.1 CPU-s on these 2 cores). Forked from a process that imported them, a dry run took 0.3 s
of wall against 3.0 started afresh, and the 2,560-step default job 0.4-0.6 CPU-s against 4.7-5.4
(measured). The fork server (multiprocessing's ``forkserver``, which ``tests/rank_pool.py`` uses
too) imports ``PRELOAD`` once and runs nothing else: no torch operation, no Ray; the only other
thread in it is OpenBLAS's idle pool, which that library restarts in a forked child.

Each child is set up as the interpreter would set up a new process: the argument vector,
``sys.path`` (the script's folder, or the working folder for ``-m``, then ``PYTHONPATH``, then
the interpreter's own), the working folder, the environment, the standard streams, a new
session, resource limits, Python's signal dispositions; it runs the code as ``__main__`` and
exits as the interpreter does (``SystemExit``'s code, 1 after a traceback, killed by SIGINT after
an uncaught ``KeyboardInterrupt``), after the non-daemonic threads, the ``atexit`` functions and
a flush of the streams. A request that a fork cannot honour the same way falls back to a real
process: another executable or interpreter options, or an environment that changes a variable
read when the preloaded modules were imported (``IMPORT_TIME_ENV``).

Not for tests of what a new interpreter imports (``tests/test_no_ray.py``,
``tests/test_compile_marks.py``), which start real processes. tests/test_forked.py runs each kind
of request both ways and compares what the code sees and what the caller gets.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import io
import json
import os
import resource
import runpy
import selectors
import signal
import subprocess
import sys
import threading
import time
import traceback
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib.util import find_spec
from multiprocessing import process as mp_process
from multiprocessing import reduction
from pathlib import Path
from typing import Any

from rlcore.procpool import forkserver_context

# the class of a main process's multiprocessing object (private to multiprocessing: this module
# is first imported in a main process, the pytest worker's or the fork server's)
MAIN_PROCESS = type(mp_process.current_process())

# What the fork server imports once (those installed: Megatron is an extra): the ranks' trainers
# (tests/rank_pool.py) and what an entry point imports before its first iteration.
PRELOAD = [
    name
    for name in (
        "torch",
        "torch.distributed",
        "torch._dynamo",  # (an optimiser's step imports it)
        "torch.distributed.checkpoint",
        "torch.utils.tensorboard",
        "transformers",
        "gymnasium",
        "hydra",
        "rlcore.cli",
        "rlcore.runners.embodied",
        "rlcore.runners.reasoning",
        "rlcore.runners.preflight",
        "rlcore.runners.supervisor",
        "rlcore.workers.reasoning.lm_actor",
        "rlcore.workers.embodied.embodied_actor",
        # the Ray workers' launch process is forked here: what it needs is in, Ray is not
        # (tests/ray_launch.py, whose import in this server forks it)
        "tests.ray_launch",
        "megatron.core",
        "ray",
    )
    if find_spec(name.split(".")[0]) is not None
]

# environment variables that the preloaded modules read when imported (Hugging Face's hub and
# transformers' cache and offline settings, Ray's constants, torch's and the BLAS libraries'
# threads, Python's own): a child asked for another value of one of these is a real process
IMPORT_TIME_ENV = (
    "HF_",
    "HUGGINGFACE",
    "TRANSFORMERS",
    "RAY_",
    "TORCH",
    "OMP_",
    "MKL_",
    "OPENBLAS",
    "CUDA",
    "PYTHON",
    "LD_",
    "TOKENIZERS",
)
# those of them that are read when used, not on import, and that a started Ray sets in its
# driver's environment (ray.init: the breakpoint hook, usage stats, token authentication)
RUN_TIME_ENV = ("PYTHONBREAKPOINT", "RAY_USAGE_STATS_ENABLED", "RAY_AUTH_MODE")


# the signals whose disposition a child sets as a new process would have it
SIGNALS = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGALRM,
    signal.SIGCHLD,
)


def context() -> Any:
    """The fork server's multiprocessing context, ``PRELOAD`` added to what it imports (read
    when the server starts; rlcore.procpool's processes fork from the same server)."""
    return forkserver_context(PRELOAD)


@dataclass
class _Spec:
    """What the child sets up: see ``_child``."""

    mode: str  # "script" | "module" | "code"
    target: str
    args: list[str]
    cwd: str
    env: dict[str, str]
    path: list[str]
    new_session: bool
    ignored: list[int]  # the signals the caller ignores, which a new process inherits
    rlimits: dict[int, tuple[int, int]] = field(default_factory=dict)


class _Fd:
    """A file descriptor that travels to the child with its request (SCM_RIGHTS, by the fork
    server's own protocol): pickled while the process starts."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self):
        return (_detach, (reduction.DupFd(self.fd),))


def _detach(dup: Any) -> int:
    return dup.detach()


_server: dict[str, Any] = {}  # "env": the server's environment, "path": a new interpreter's


def _server_env() -> dict[str, str]:
    """The environment the fork server's children start with, asked of a child once: the
    pytest worker's when the server started, plus what the preloaded modules set on import
    (Ray's RAY_CLIENT_MODE, inductor's cache folder, ...: ``_server["added"]``, which a new
    interpreter importing them sets too)."""
    if "env" not in _server:
        read, write = os.pipe()
        process = context().Process(target=_report_env, args=(_Fd(write),))
        process.start()
        os.close(write)
        with open(read, "rb") as f:
            _server["env"] = json.loads(f.read())
        process.join()
        _server["added"] = {k: v for k, v in _server["env"].items() if k not in os.environ}
    return _server["env"]


def server_environment() -> dict[str, str]:
    """The environment under which a request is forked for sure (the fork server's, less what
    its imports set)."""
    _server_env()
    return {k: v for k, v in _server["env"].items() if k not in _server["added"]}


def _report_env(fd: int) -> None:
    with open(fd, "w") as f:
        json.dump(dict(os.environ), f)


def _interpreter_path(env: Mapping[str, str]) -> list[str]:
    """A new interpreter's ``sys.path`` after its first entry, without ``PYTHONPATH``'s."""
    key = "path"
    if key not in _server:
        clean = {k: v for k, v in env.items() if k != "PYTHONPATH"}
        out = subprocess.run(
            [sys.executable, "-c", "import json, sys; print(json.dumps(sys.path[1:]))"],
            env=clean,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        _server[key] = json.loads(out)
    return list(_server[key])


def _parse(args: Sequence[str | os.PathLike]) -> tuple[str, str, list[str]] | None:
    """``(mode, target, rest)`` for ``[sys.executable, script | -m M | -c C, *rest]``; None for
    anything else (a real process runs it)."""
    argv = [os.fspath(a) for a in args]
    if len(argv) < 2 or argv[0] != sys.executable:
        return None
    first = argv[1]
    if first in ("-m", "-c") and len(argv) >= 3:
        return ("module" if first == "-m" else "code", argv[2], argv[3:])
    if first.startswith("-"):
        return None
    return ("script", first, argv[2:])


def _value(key: str, value: str | None, cwd: str) -> Any:
    """A variable's value as what reads it sees it. The dynamic loader looks a library up by
    name in ``LD_LIBRARY_PATH``'s folders (an empty entry or a relative one: from the working
    folder), so folders that hold no shared object change nothing it finds: OpenCV's import
    prepends a folder that its wheels do not ship, and an empty entry, once in each process
    that imports it (the pytest worker's and the fork server's values then differ in nothing
    the loader finds)."""
    if key != "LD_LIBRARY_PATH":
        return value
    found = []
    for entry in value.split(":") if value is not None else ():
        folder = os.path.realpath(os.path.join(cwd, entry or "."))
        with contextlib.suppress(OSError):
            if folder not in found and any(".so" in name for name in os.listdir(folder)):
                found.append(folder)
    return tuple(found)


def _forkable(
    env: Mapping[str, str],
    cwd: str | os.PathLike | None,
    read_on_import: tuple[str, ...] = IMPORT_TIME_ENV,
    read_later: tuple[str, ...] = RUN_TIME_ENV,
) -> bool:
    """Whether the preloaded modules were imported under this environment's values (those
    they read on import: the variables ``read_on_import`` starts, bar those ``read_later``
    names): else a fork would not be the process asked for."""
    server = _server_env()
    keys = (set(env) | set(server)) - set(_server["added"])
    cwd = os.path.abspath(cwd if cwd is not None else os.getcwd())
    changed = {
        k
        for k in keys
        if env.get(k) != server.get(k)
        and _value(k, env.get(k), cwd) != _value(k, server.get(k), cwd)
    }
    blocking = sorted(
        k for k in changed if k.startswith(read_on_import) and k not in ("PYTHONPATH", *read_later)
    )
    if blocking:  # (said where RLCORE_FORKED_LOG names a file: why a request ran for real)
        log = os.environ.get("RLCORE_FORKED_LOG")
        if log:
            with open(log, "a") as f:
                f.write(json.dumps({k: [env.get(k), server.get(k)] for k in blocking}) + "\n")
    return not blocking


def child_spec(
    args: Sequence[str | os.PathLike],
    *,
    cwd: str | os.PathLike | None,
    env: Mapping[str, str] | None,
    start_new_session: bool,
) -> _Spec:
    """What a forked child sets up to be ``args`` run as a new process would be (a request that
    ``_parse`` and ``_forkable`` accept)."""
    mode, target, rest = _parse(args)
    env = dict(os.environ if env is None else env)
    cwd = os.path.abspath(cwd if cwd is not None else os.getcwd())
    if mode == "script":
        first = os.path.dirname(os.path.realpath(os.path.join(cwd, target)))
    else:
        first = cwd if mode == "module" else ""
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return _Spec(
        mode=mode,
        target=target,
        args=rest,
        cwd=cwd,
        env={**_server["added"], **env},
        path=[first, *[os.path.join(cwd, p) for p in extra], *_interpreter_path(env)],
        new_session=start_new_session,
        ignored=[s for s in SIGNALS if signal.getsignal(s) == signal.SIG_IGN],
    )


class Popen:
    """A forked child with ``subprocess.Popen``'s surface (``pid``, ``stdin``, ``stdout``,
    ``stderr``, ``returncode``, ``poll``, ``wait``, ``communicate``, ``send_signal``,
    ``terminate``, ``kill``; a context manager). ``rlimits``: ``{resource.RLIMIT_*: (soft,
    hard)}`` set in the child before it runs (where ``subprocess`` would take a
    ``preexec_fn``)."""

    def __new__(cls, args, **kwargs):
        parsed = _parse(args)
        env = dict(os.environ if kwargs.get("env") is None else kwargs["env"])
        if parsed is None or not _forkable(env, kwargs.get("cwd")):
            rlimits = kwargs.pop("rlimits", None)
            if rlimits:
                kwargs["preexec_fn"] = _Limits(rlimits)
            return subprocess.Popen(args, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        args: Sequence[str | os.PathLike],
        *,
        cwd: str | os.PathLike | None = None,
        env: Mapping[str, str] | None = None,
        stdin: Any = None,
        stdout: Any = None,
        stderr: Any = None,
        text: bool = False,
        start_new_session: bool = False,
        rlimits: Mapping[int, tuple[int, int]] | None = None,
    ) -> None:
        self.args = args
        self.text = text
        self.returncode: int | None = None
        spec = child_spec(args, cwd=cwd, env=env, start_new_session=start_new_session)
        spec.rlimits = dict(rlimits or {})
        ends: list[int] = []  # the child's ends, closed here once it has them
        ours: list[int | None] = []
        for i, (how, default) in enumerate(((stdin, 0), (stdout, 1), (stderr, 2))):
            if how == subprocess.PIPE:
                r, w = os.pipe()
                mine, theirs = (w, r) if i == 0 else (r, w)
                ends.append(theirs)
                ours.append(mine)
            elif how == subprocess.DEVNULL:
                ends.append(os.open(os.devnull, os.O_RDWR))
                ours.append(None)
            elif how == subprocess.STDOUT and i == 2:
                ends.append(os.dup(ends[1]))
                ours.append(None)
            else:
                fd = default if how is None else (how if isinstance(how, int) else how.fileno())
                ends.append(os.dup(fd))
                ours.append(None)
        self._process = context().Process(
            target=_child, args=(spec, *(_Fd(fd) for fd in ends)), daemon=False
        )
        try:
            self._process.start()
        finally:
            for fd in ends:
                os.close(fd)
        self.pid = self._process.pid
        self.stdin = self._wrap(ours[0], "wb", text)
        self.stdout = self._wrap(ours[1], "rb", text)
        self.stderr = self._wrap(ours[2], "rb", text)

    @staticmethod
    def _wrap(fd: int | None, mode: str, text: bool) -> Any:
        if fd is None:
            return None
        raw = open(fd, mode)  # noqa: SIM115 (closed by communicate, or with the process)
        if not text:
            return raw
        if "w" in mode:
            return io.TextIOWrapper(raw, encoding="utf-8", write_through=True)
        return io.TextIOWrapper(raw, encoding="utf-8")

    def __enter__(self) -> Popen:
        return self

    def __exit__(self, *exc: Any) -> None:
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self.wait()

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._process.exitcode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._process.join(timeout)
            if self._process.exitcode is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self.returncode = self._process.exitcode
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # (ended meanwhile, as subprocess)
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, input: Any = None, timeout: float | None = None) -> tuple[Any, Any]:
        """The rest of the output, read until both streams end, then the exit; ``input``
        written first (small inputs: the tests')."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self.stdin is not None:
            if input:
                self.stdin.write(input)
            self.stdin.close()
        chunks: dict[Any, list[bytes]] = {}
        with selectors.DefaultSelector() as selector:
            for stream in (self.stdout, self.stderr):
                if stream is not None:
                    chunks[stream] = []
                    selector.register(stream.fileno(), selectors.EVENT_READ, stream)
            while selector.get_map():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    self.kill()
                    raise subprocess.TimeoutExpired(self.args, timeout)
                for key, _ in selector.select(left):
                    data = os.read(key.fd, 1 << 16)
                    if data:
                        chunks[key.data].append(data)
                    else:
                        selector.unregister(key.fd)
        for stream in chunks:
            stream.close()
        self.wait(None if deadline is None else max(deadline - time.monotonic(), 0.01))
        out = [b"".join(chunks[s]) if s in chunks else None for s in (self.stdout, self.stderr)]
        if self.text:
            out = [_decode(b) for b in out]
        return out[0], out[1]


def _decode(data: bytes | None) -> str | None:
    if data is None:
        return None
    return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")


class _Limits:
    """Resource limits set in the child: a forked child's, or ``preexec_fn`` of the real
    process a request falls back to."""

    def __init__(self, rlimits: Mapping[int, tuple[int, int]]) -> None:
        self.rlimits = dict(rlimits)

    def __call__(self) -> None:
        for which, limits in self.rlimits.items():
            resource.setrlimit(which, limits)


def run(
    args: Sequence[str | os.PathLike],
    *,
    input: Any = None,
    capture_output: bool = False,
    timeout: float | None = None,
    check: bool = False,
    **kwargs: Any,
) -> subprocess.CompletedProcess:
    """``subprocess.run`` on a forked child (``Popen``'s arguments)."""
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    with Popen(args, **kwargs) as process:
        try:
            out, err = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
    done = subprocess.CompletedProcess(args, process.returncode, out, err)
    if check:
        done.check_returncode()
    return done


# ------------------------------------------------------------------------------ in the child


def _child(spec: _Spec, stdin: int, stdout: int, stderr: int) -> None:
    """Become ``python <spec>``: never returns."""
    for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
        os.dup2(fd, target)
    for fd in {stdin, stdout, stderr} - {0, 1, 2}:
        os.close(fd)
    if spec.new_session:
        os.setsid()
    _Limits(spec.rlimits)()
    os.chdir(spec.cwd)
    os.environ.clear()
    os.environ.update(spec.env)
    # the streams a new interpreter opens on its descriptors: stderr line-buffered (3.9+),
    # both unbuffered under PYTHONUNBUFFERED
    unbuffered = bool(spec.env.get("PYTHONUNBUFFERED"))
    sys.stdin = sys.__stdin__ = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stdout = sys.__stdout__ = _stream(1, "strict", unbuffered)
    sys.stderr = sys.__stderr__ = _stream(2, "backslashreplace", True)
    # dispositions across exec: what the caller ignores stays ignored, the rest is the default
    # (SIGINT: Python's KeyboardInterrupt); Python itself ignores SIGPIPE and SIGXFSZ
    for sig in SIGNALS:
        default = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
        signal.signal(sig, signal.SIG_IGN if sig in spec.ignored else default)
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_IGN)
    sys.path[:] = spec.path
    _become_main()
    code, interrupted = 0, False
    try:
        if spec.mode == "module":
            sys.argv = [spec.target, *spec.args]  # (run_module sets argv[0] to its file)
            runpy.run_module(spec.target, run_name="__main__", alter_sys=True)
        else:  # a script (``__file__`` absolute, as since 3.9; argv[0] as given) or ``-c``
            script = spec.mode == "script"
            sys.argv = [spec.target if script else "-c", *spec.args]
            path = os.path.abspath(spec.target) if script else "<string>"
            main = types.ModuleType("__main__")
            main.__dict__.update(__builtins__=builtins, __spec__=None, __package__=None)
            if script:
                main.__dict__.update(__file__=path, __cached__=None)
            sys.modules["__main__"] = main
            source = Path(path).read_bytes() if script else spec.target
            exec(compile(source, path, "exec"), main.__dict__)
    except SystemExit as exit_:
        code = _exit_code(exit_.code)
    except KeyboardInterrupt:
        _print_exception()
        interrupted = True
    except BaseException:
        _print_exception()
        code = 1
    with contextlib.suppress(BaseException):
        threading._shutdown()  # the non-daemonic threads, as the interpreter's exit waits
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()
    if interrupted:  # (the interpreter's own exit after an uncaught KeyboardInterrupt)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code)


def _become_main() -> None:
    """multiprocessing's state as a new interpreter has it: the main process (a new
    authentication key, no parent), the platform's default start method (a fork server's child
    is made to default to ``forkserver``), no resource tracker or fork server of its own yet
    (not the pytest worker's)."""
    import multiprocessing
    from multiprocessing import forkserver, process, resource_tracker

    multiprocessing.set_start_method(None, force=True)
    process.ORIGINAL_DIR = os.getcwd()  # (set when multiprocessing was imported: the server's)
    process._current_process = MAIN_PROCESS()
    process._parent_process = None
    tracker = resource_tracker._resource_tracker
    server = forkserver._forkserver
    for fd in (tracker._fd, server._forkserver_alive_fd):
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
    tracker._fd = tracker._pid = None
    server._forkserver_alive_fd = server._forkserver_address = server._inherited_fds = None


def _stream(fd: int, errors: str, write_through: bool) -> io.TextIOWrapper:
    raw = open(fd, "wb", closefd=False)  # noqa: SIM115
    return io.TextIOWrapper(
        raw, encoding="utf-8", errors=errors, line_buffering=fd == 2, write_through=write_through
    )


def _exit_code(code: Any) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    with contextlib.suppress(BaseException):
        print(code, file=sys.stderr)
    return 1


def _print_exception() -> None:
    """The traceback from the run code's first frame on, as the interpreter prints it."""
    kind, value, tb = sys.exc_info()
    here = {__file__, runpy.__file__}  # (the frames above the run code's)
    while tb is not None and tb.tb_frame.f_code.co_filename in here:
        tb = tb.tb_next
    with contextlib.suppress(BaseException):
        sys.stderr.write("".join(traceback.format_exception(kind, value, tb)))
