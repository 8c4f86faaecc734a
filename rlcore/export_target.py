"""Where ``rlcore export`` writes: a new folder, or an earlier export it replaces whole.

An export is written into a temporary folder beside its target and renamed into place only once
complete (``written_whole``), so a failure part-way (a full disk, a file-size limit, an error in
the model's code) leaves the target as it was: empty, absent, or the earlier export whole, never
a folder that loads as the export while holding part of another. Its last file,
``rlcore_export.json``, lists every file it wrote (size and sha256); ``--force`` replaces an
earlier export only when that list names every file in it, so a file a user put beside an export
is never deleted: it is named, and the export refused (``check_target``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from rlcore.config.errors import ConfigError
from rlcore.data.identity import file_sha256
from rlcore.runners.checkpoint import DRIVER_FILE
from rlcore.runners.files import replace_folder

EXPORT_MANIFEST = "rlcore_export.json"
# one of these in every export, its manifest in each one written since it had one
EXPORT_MARKS = ("policy.json", "generation_config.json", EXPORT_MANIFEST)


def check_target(out: Path, force: bool) -> None:
    """``out`` is a new or empty folder (or, with ``force``, an earlier export holding only the
    files it wrote) outside every run folder; ``ConfigError`` naming what is in the way."""
    for folder in (out.resolve(), *out.resolve().parents):
        run_folder = (folder / "checkpoints").is_dir() and (folder / "config.json").is_file()
        if run_folder or (folder / DRIVER_FILE).is_file():  # a run's folder, or a checkpoint
            raise ConfigError(
                f"export: {out} is inside the run folder {folder}, whose files it could "
                "replace; export to a folder outside it"
            )
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise ConfigError(f"export: {out} is a file or a link; give a new or empty folder")
    if not out.is_dir() or not any(out.iterdir()):
        return
    earlier = any((out / mark).is_file() for mark in EXPORT_MARKS)
    if not force or not earlier:
        what = "an earlier export (--force replaces it)" if earlier else "other files"
        raise ConfigError(f"export: {out} holds {what}; give a new or empty folder")
    if not (out / EXPORT_MANIFEST).is_file():
        raise ConfigError(
            f"export: {out} holds an export with no list of its files ({EXPORT_MANIFEST}: "
            "written by an earlier rlcore), so --force cannot tell its files from others; "
            "move or delete it, then export again"
        )
    foreign = _foreign_files(out)
    if foreign:
        shown = ", ".join(str(p.relative_to(out)) for p in foreign[:3])
        more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        raise ConfigError(
            f"export: {out} holds files no export wrote ({shown}{more}), which --force would "
            "delete with the earlier export; move them out of it, or export to another folder"
        )


def _foreign_files(out: Path) -> list[Path]:
    """The files and links in ``out`` its export manifest does not list (all of them when the
    manifest cannot be read)."""
    listed: set[str] = set()
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        listed = set(json.loads((out / EXPORT_MANIFEST).read_text())["files"])
    found = sorted(p for p in out.rglob("*") if p.is_symlink() or not p.is_dir())
    return [p for p in found if str(p.relative_to(out)) not in listed | {EXPORT_MANIFEST}]


@contextlib.contextmanager
def written_whole(out: Path, checkpoint: Path) -> Iterator[Path]:
    """A temporary folder beside ``out`` to write the export of ``checkpoint`` into; when the
    block ends without error, its manifest is written and it replaces ``out``; on an error it
    is removed and ``out`` left as it was (a write error is a ``CheckpointWriteError`` naming
    the file, in one line, that says so)."""
    from safetensors import SafetensorError

    from rlcore.workers.files.state_files import CheckpointWriteError, write_failure

    out.parent.mkdir(parents=True, exist_ok=True)
    # (not mkdtemp: its folder is the user's only, and becomes the export)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.export")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        try:
            yield tmp
            _write_manifest(tmp, checkpoint)
        except (OSError, SafetensorError) as error:
            raise write_failure(tmp, error, "the export") from None
    except CheckpointWriteError as error:
        shutil.rmtree(tmp, ignore_errors=True)
        where = str(error).replace(str(tmp), str(out))  # (the temporary folder is gone)
        raise CheckpointWriteError(f"{where} ({out} is as it was before this export)") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    replace_folder(tmp, out)


def _write_manifest(folder: Path, checkpoint: Path) -> None:
    files = {
        str(p.relative_to(folder)): {"bytes": p.stat().st_size, "sha256": file_sha256(p)}
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }
    described = {"checkpoint": str(checkpoint.resolve()), "files": files}
    (folder / EXPORT_MANIFEST).write_text(json.dumps(described, indent=1))
