"""Writing into a run folder without following links: each file is written to a new temporary
file beside it and renamed over the old one (``write_replacing``), so a link planted where a file
goes is replaced, its target untouched, and a crash mid-write leaves the old file whole; a run
folder that holds links is refused before a run writes into it (``check_no_links``). A run holds
its folder's lock (``lock_run_folder``: ``fcntl.flock`` on ``RUN/.lock``) while it runs, so a
second run started on the same folder is refused at once instead of training beside it."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from pathlib import Path

from rlcore.config.errors import ConfigError


def write_replacing(path: Path, data: str | bytes) -> None:
    """``data`` as the new content of ``path`` (see the module docstring)."""
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(raw)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def replace_folder(new: Path, target: Path) -> None:
    """``new`` (a finished folder beside ``target``) renamed to ``target``: an earlier
    ``target`` is moved aside first and deleted only once ``new`` is in place, so at every
    moment one whole version sits at ``target`` or beside it (``.TARGET.PID.old``: a name no
    user folder has, and no checkpoint glob matches)."""
    aside = target.with_name(f".{target.name}.{os.getpid()}.old")
    shutil.rmtree(aside, ignore_errors=True)  # (ours: only a crash here leaves one)
    if target.exists() or target.is_symlink():
        target.rename(aside)
    new.rename(target)
    if aside.is_dir() and not aside.is_symlink():
        shutil.rmtree(aside, ignore_errors=True)
    elif aside.exists() or aside.is_symlink():
        aside.unlink()


def first_link(folder: Path) -> Path | None:
    """The first link inside ``folder`` (in sorted order), or None (the folder itself may be
    one: where a user keeps runs is theirs to choose)."""
    if not folder.is_dir():
        return None
    # (rglob lists a link, never walks into it)
    return next((p for p in sorted(folder.rglob("*")) if p.is_symlink()), None)


def check_no_links(run_dir: Path, key: str = "runner.resume_dir") -> None:
    """``ConfigError`` naming the first link inside ``run_dir`` (``first_link``)."""
    link = first_link(run_dir)
    if link is not None:
        raise ConfigError(
            f"{key}: {link} is a link (to {os.readlink(link)}); a run never writes or reads "
            "through links in its folder: replace it with the file or folder itself"
        )


LOCK_FILE = ".lock"
_held: dict[str, int] = {}  # run folder -> the descriptor of its lock, held by this process


def lock_run_folder(run_dir: Path) -> None:
    """Hold ``run_dir``'s lock until ``unlock_run_folder`` (or this process ends: the system
    releases it, so a killed run leaves no stale lock); ``ConfigError`` naming the process that
    holds it if another does."""
    key = str(run_dir.resolve())
    if key in _held:
        return
    lock = run_dir / LOCK_FILE
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as error:  # a folder, a link, or no right to write it: nothing a run made
        what = "a folder" if lock.is_dir() and not lock.is_symlink() else error.strerror
        raise ConfigError(
            f"runner.run_name: {lock}, the run folder's lock file, cannot be opened ({what}); "
            f"a run makes it there itself: remove {lock}, or give another runner.run_name"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise ConfigError(
            f"runner.run_name: {run_dir} is in use by another run (process {holder}); wait for "
            "it to end, or give this one another runner.run_name"
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    _held[key] = fd


def unlock_run_folder(run_dir: Path) -> None:
    fd = _held.pop(str(run_dir.resolve()), None)
    if fd is not None:
        os.close(fd)  # (closing the descriptor releases the lock)
