"""Writing into a run folder without following links: each file is written to a new temporary
file beside it and renamed over the old one (``write_replacing``), so a link planted where a file
goes is replaced, its target untouched, and a crash mid-write leaves the old file whole; a run
folder that holds links is refused before a run writes into it (``check_no_links``)."""

from __future__ import annotations

import contextlib
import os
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


def check_no_links(run_dir: Path, key: str = "runner.resume_dir") -> None:
    """``ConfigError`` naming the first link inside ``run_dir`` (the folder itself may be one:
    where a user keeps runs is theirs to choose)."""
    if not run_dir.is_dir():
        return
    for path in sorted(run_dir.rglob("*")):  # (rglob lists a link, never walks into it)
        if path.is_symlink():
            raise ConfigError(
                f"{key}: {path} is a link (to {os.readlink(path)}); a run never writes or reads "
                "through links in its folder: replace it with the file or folder itself"
            )
