"""What a run trained on, recorded in each checkpoint (``data_identity``) and compared when it is
resumed (``changed_files``): a prompt file rewritten at the same path would otherwise be resumed
on without a word, and a shorter one would break the sampler's order mid-run."""

from __future__ import annotations

import functools
import hashlib
import os
from typing import Any

from rlcore.data.prompts import DataError


def data_identity(files: tuple[str, ...] | list[str]) -> dict[str, dict[str, Any]]:
    """``{path: {"bytes": size, "sha256": digest}}`` of each file."""
    identity = {}
    for path in files:
        stat = os.stat(path)
        identity[path] = {
            "bytes": stat.st_size,
            "sha256": _sha256(path, stat.st_size, stat.st_mtime_ns),
        }
    return identity


def file_sha256(path: str | os.PathLike) -> str:
    """The sha256 of a file's bytes, read a MiB at a time (also the checkpoint manifest's)."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@functools.lru_cache(maxsize=64)
def _sha256(path: str, size: int, mtime_ns: int) -> str:  # (cached while the file is unchanged)
    return file_sha256(path)


def changed_files(saved: dict[str, Any], files: dict[str, tuple[str, ...]]) -> list[str]:
    """One line per file of ``files`` (``{config key: paths}``) that differs from ``saved``
    (``{config key: data_identity}``), naming the key: missing, resized or rewritten."""
    lines = []
    for key, paths in files.items():
        before = saved.get(key, {})
        if sorted(before) != sorted(paths):
            lines.append(
                f"{key}: the checkpoint trained on {sorted(before)}, this run names {sorted(paths)}"
            )
            continue
        for path in paths:
            if not os.path.isfile(path):
                lines.append(f"{key}: {path} is gone")
                continue
            now = data_identity([path])[path]
            if now != before[path]:
                how = (
                    f"{before[path]['bytes']} -> {now['bytes']} bytes"
                    if now["bytes"] != before[path]["bytes"]
                    else "the same size, other content (sha256)"
                )
                lines.append(f"{key}: {path} changed since the checkpoint ({how})")
    return lines


def data_state(files: dict[str, tuple[str, ...]], train_rows: int) -> dict[str, Any]:
    """What a checkpoint records of the data (``files``: ``{config key: paths}``)."""
    return {
        "data": {key: data_identity(paths) for key, paths in files.items()},
        "train_rows": train_rows,
    }


def resumed_data(
    state: dict[str, Any], files: dict[str, tuple[str, ...]], train_rows: int
) -> list[str]:
    """The files that changed since the checkpoint ``state`` (a resume that reached here was
    allowed to go on with them: ``check_resumable``); ``DataError`` when the training prompts
    are not as many as the checkpoint's prompt order covers."""
    rows = state.get("train_rows", train_rows)
    if rows != train_rows:
        raise DataError(
            f"data.train_files: the checkpoint's prompt order covers {rows} training prompts, "
            f"these files give {train_rows}; resume on as many prompts"
        )
    return changed_files(state["data"], files) if "data" in state else []
