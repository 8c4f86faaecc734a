"""The built-in ``python`` tool: runs a snippet in a separate Python process and returns what it
printed.

Limits (class attributes; a subclass changes them):

- a wall-clock deadline (``timeout_s``): past it the process is killed;
- a memory cap (``memory_mb``, the address-space limit ``RLIMIT_AS``): an allocation past it
  raises ``MemoryError`` in the snippet; CPU time is capped too (``RLIMIT_CPU``);
- no network: the process runs in its own network namespace where the kernel lets an
  unprivileged user make one (only a loopback device, down), and in every case an audit hook
  refuses sockets;
- a scratch folder, new for each call and removed after, as the working directory: writing,
  removing or renaming outside it is refused, as are new processes (``subprocess``, ``os.system``,
  ``fork``, ``exec``) and ``ctypes`` (by the audit hook, installed before the snippet runs);
  written files are capped at ``max_file_mb`` (``RLIMIT_FSIZE``);
- the process dies with its parent (``PR_SET_PDEATHSIG``), so a killed tool process leaves no
  snippet behind.

The audit hook is a guard against mistakes and casual escapes of a model's code, not a security
boundary against deliberately hostile native code; run untrusted models' tools in a container
as well (docs/agents.md). A snippet that fails, runs out of time or memory raises ``ToolError``
(the model reads the error; the run counts it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from typing import Any, ClassVar


class ToolError(RuntimeError):
    """A call that did not succeed: the message is what the model reads."""


# Run by ``python -I -c`` with: memory MiB, CPU s, file MiB; the snippet on stdin.
SANDBOX = r"""
import ctypes, os, resource, signal, sys
memory_mb, cpu_s, file_mb = (int(x) for x in sys.argv[1:4])
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the parent
libc.unshare(0x10000000 | 0x40000000)  # CLONE_NEWUSER|NEWNET where allowed (else: the hook)
resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
resource.setrlimit(resource.RLIMIT_FSIZE, (file_mb << 20, file_mb << 20))
code = sys.stdin.read()
scratch = os.path.realpath(os.getcwd())
def inside(path):
    try:
        path = os.fsdecode(path) if not isinstance(path, int) else None
    except TypeError:
        return False
    if path is None:
        return True
    real = os.path.realpath(path)
    return real == scratch or real.startswith(scratch + os.sep)
WRITES = {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown",
          "os.symlink", "os.link", "os.truncate", "os.utime", "shutil.rmtree"}
REFUSED = ("socket.", "subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
           "os.fork", "os.forkpty", "ctypes.", "os.kill", "os.putenv", "os.unsetenv")
def guard(event, args):
    if event.startswith(REFUSED):
        raise PermissionError(f"{event} is not allowed in the python tool")
    if event == "open" and args[1] is not None and any(c in str(args[1]) for c in "wax+"):
        if not inside(args[0]):
            raise PermissionError(f"writing {args[0]} outside the tool's folder is not allowed")
    elif event in WRITES and not all(inside(a) for a in args[:2] if isinstance(a, (str, bytes))):
        raise PermissionError(f"{event} outside the tool's folder is not allowed")
del ctypes, libc
sys.addaudithook(guard)
namespace = {"__name__": "__main__"}
exec(compile(code, "<tool>", "exec"), namespace)
"""


class PythonInterpreter:
    name = "python"
    description = (
        "Run a Python snippet and return what it prints (stdout). No network, no files "
        "outside a scratch folder, limited time and memory."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"code": {"type": "string", "description": "the Python source to run"}},
        "required": ["code"],
    }
    timeout_s: float = 5.0
    memory_mb: int = 512
    max_file_mb: int = 16
    max_output_chars: int = 2000

    def call(self, arguments: dict[str, Any]) -> str:
        code = str(arguments["code"])
        cpu_s = max(1, int(self.timeout_s) + 1)
        limits = [str(self.memory_mb), str(cpu_s), str(self.max_file_mb)]
        with tempfile.TemporaryDirectory(prefix="rlcore-python-tool-") as scratch:
            try:
                done = subprocess.run(
                    [sys.executable, "-I", "-c", SANDBOX, *limits],
                    input=code,
                    capture_output=True,
                    text=True,
                    cwd=scratch,
                    timeout=self.timeout_s,
                    env={"PATH": os.defpath, "HOME": scratch, "TMPDIR": scratch},
                )
            except subprocess.TimeoutExpired:
                raise ToolError(f"timed out after {self.timeout_s:g} s") from None
        out = done.stdout[-self.max_output_chars :]
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines()
            last = lines[-1] if lines else f"exit code {done.returncode}"
            if done.returncode < 0:
                last = f"killed by signal {-done.returncode} ({last})"
            raise ToolError(f"{last}" + (f"\nstdout: {out}" if out else ""))
        return out
