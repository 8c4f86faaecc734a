"""Process and socket bookkeeping, through psutil: a process known by its pid and start time (so
a pid reused by a later process is never mistaken for it), its descendants, the processes that
carry a mark in their environment, and the TCP sockets processes listen on.

Used by the reaper (``reaper.py``, which stops a local Ray a SIGKILLed driver left behind), and by
the tests and ``benchmarks/probes.py`` that check what a run leaves running or listening.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import psutil

GONE = (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied)


def identity(pid: int) -> str | None:
    """``pid:start_time`` of a live process; None when it is gone or a zombie."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        return f"{pid}:{process.create_time()}"
    except GONE:
        return None


def alive(pid: int) -> bool:
    """The process runs (it exists and is not a zombie, whose exit only awaits its parent)."""
    return identity(pid) is not None


def stopped(pid: int) -> bool:
    """The process exists and is stopped (SIGSTOP, SIGTSTP, a debugger): it runs nothing."""
    try:
        return psutil.Process(pid).status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
    except GONE:
        return False


def children(pid: int, recursive: bool = False) -> list[int]:
    """The live processes ``pid`` started (with ``recursive``, and theirs)."""
    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=recursive) if alive(p.pid)]
    except GONE:
        return []


def command_line(pid: int) -> str:
    """``pid``'s command line, its arguments joined by spaces ("" when it is gone)."""
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except GONE:
        return ""


def command_lines() -> dict[int, str]:
    """Every process's command line, by pid."""
    return {
        p.info["pid"]: " ".join(p.info["cmdline"] or ())
        for p in psutil.process_iter(["pid", "cmdline"])
    }


def with_environment(name: str, value: str) -> list[int]:
    """The processes whose environment sets ``name`` to ``value`` (a mark a parent passed to
    the processes it started, kept when they are handed to init)."""
    found = []
    for process in psutil.process_iter(["pid"]):
        try:
            if process.environ().get(name) == value:
                found.append(process.pid)
        except GONE:
            continue
    return found


@dataclass(frozen=True)
class Listener:
    """A TCP socket in the listening state: who holds it, and where it listens."""

    pid: int
    address: str
    port: int

    @property
    def loopback(self) -> bool:
        ip = ipaddress.ip_address(self.address)
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return ip.is_loopback


def listening(pids: set[int]) -> list[Listener]:
    """The TCP sockets ``pids`` listen on (what ``ss -ltnp`` shows of them)."""
    return [
        Listener(c.pid, c.laddr.ip, c.laddr.port)
        for c in psutil.net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN and c.pid in pids
    ]
