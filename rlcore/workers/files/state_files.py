"""A checkpoint's own files, read and written in one place: read as plain data only
(``load_state``), and a write that fails (a full disk, a file-size limit) named in one line
(``writing``, ``write_failure``; ``save_state`` for a ``.pt`` file), both as bad inputs: refused,
not restarted."""

from __future__ import annotations

import pickle
import resource
import shutil
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from rlcore.config.errors import ConfigError


class UnsafeCheckpoint(ConfigError):
    """A checkpoint file that asks to run code (or to build an object it has no reason to hold),
    or that is not one: refused, named, in one line (a bad input, not a lost worker)."""


class CheckpointWriteError(ConfigError):
    """A checkpoint file that could not be written: named, with what limits writing there."""


@contextmanager
def writing(path: Path, what: str = "the checkpoint") -> Iterator[None]:
    """Write ``path`` in the block; a failure (torch's writer says only "unexpected pos", the
    OS "File too large" or "No space left", torch.distributed.checkpoint a traceback per rank)
    is a ``CheckpointWriteError`` (``write_failure``)."""
    from safetensors import SafetensorError

    try:
        yield
    except (OSError, RuntimeError, SafetensorError, *_dcp_failure()) as error:
        raise write_failure(path, error, what) from None


def _dcp_failure() -> tuple[type[BaseException], ...]:
    """torch.distributed.checkpoint's exception, if that module is loaded: a writer that raised
    it had loaded it. Not imported for it (0.5 s: every process that writes a checkpoint)."""
    api = sys.modules.get("torch.distributed.checkpoint.api")
    return () if api is None else (api.CheckpointException,)


def write_failure(path: Path, error: BaseException, what: str = "the checkpoint") -> ConfigError:
    """``error`` writing ``path`` as a ``CheckpointWriteError`` naming the file (the one the OS
    names, if it names one), the free space on its disk and the file-size limit, in one line
    (``what``: what could not be written)."""
    if isinstance(error, _dcp_failure()):  # (a BaseException holding each rank's error)
        error = next(iter(error.failures.values()))[0]
    first = next(iter(str(error).strip().splitlines()), type(error).__name__)
    if isinstance(error, OSError) and error.filename:  # (named once, first)
        path, first = Path(error.filename), f"[Errno {error.errno}] {error.strerror}"
    limits = []
    try:
        free = shutil.disk_usage(Path(path).parent).free
        limits.append(f"{free / 2**20:.0f} MiB free on its disk")
    except OSError:
        pass
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft != resource.RLIM_INFINITY:
        limits.append(f"a file-size limit of {soft} bytes (ulimit -f)")
    return CheckpointWriteError(
        f"{path}: {what} could not be written ({first}); "
        f"{', '.join(limits) or 'no limit known'}: free space, or raise the limit"
    )


def save_state(state: Any, path: Path) -> None:
    """``torch.save(state, path)`` inside ``writing``: the counterpart of ``load_state``."""
    with writing(path):
        torch.save(state, path)


def load_state(path: Path, mmap: bool = False) -> Any:
    """``torch.load(path, weights_only=True)``: a checkpoint's ``.pt`` file as plain data; one
    torch's restricted unpickler refuses (it asks to run code) or cannot read (damaged, not a
    torch file) is an ``UnsafeCheckpoint`` naming it."""
    try:
        with warnings.catch_warnings():  # (torch warns of a foreign pickle before refusing it)
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            return torch.load(path, weights_only=True, mmap=mmap)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as error:
        text = str(error)
        # torch's message suggests turning weights_only off (running the file's code): say
        # what it found instead
        if "WeightsUnpickler error:" in text:
            rest = text.split("WeightsUnpickler error:", 1)[1].splitlines()
            found = next((line.strip() for line in rest if line.strip()), "")
            found = found.split(" Please use", 1)[0]  # (its advice: allowlist what it refused)
            why = f"it asks for more than plain data ({found})"
        else:
            first = next(iter(text.strip().splitlines()), type(error).__name__)
            why = f"torch cannot read it ({first})"
        raise UnsafeCheckpoint(
            f"{path}: not loaded: {why}; the file is damaged or was not written by rlcore, "
            "which reads checkpoints as plain data only: resume from another checkpoint"
        ) from None
