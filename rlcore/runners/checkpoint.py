"""One run folder and one checkpoint layout for both modes; a resumed run continues bit for bit.

    RUN/config.json, RUN/summary.json, RUN/tensorboard/
    RUN/checkpoints/iter_000010/
        driver.json          the config, the ``Progress``, the driver's own state, world sizes
        actor/               model.safetensors (rank 0) and trainer_rank{r}.pt (optimiser,
                             schedule, shuffle) of every rank; under fsdp2, shards/ (every rank's
                             torch.distributed.checkpoint shards of the weights and optimiser)
                             and trainer_rank{r}.pt (schedule, shuffle)
        critic/ ...          likewise
        rollout/rank{r}.pt   each rank's sampling RNG
        env/                 each rank's carry-over (rank{r}.pt), and its pickled envs only with
                             env.checkpoint_state=pickle
        manifest.json        every file above with its size and sha256, written last

Each component writes its own folder (``save_checkpoint(dir)``, every rank its own files), so a
component placed in another process writes where it runs: on several machines the run folder
must be on storage they share. A checkpoint is written to a temporary folder, its files
flushed, its manifest written last, then renamed into place: a crash mid-write leaves the
previous one whole, and a checkpoint whose files disagree with its manifest (truncated, edited,
half-copied) is never loaded. ``runner.keep_checkpoints`` bounds how many stay.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlcore.config.errors import ConfigError
from rlcore.config.foreign import current_keys
from rlcore.config.schema import SCHEMAS
from rlcore.config.validate import schema_defaults
from rlcore.data.identity import changed_files, file_sha256
from rlcore.log import warn
from rlcore.runners.files import (
    check_no_links,
    first_link,
    lock_run_folder,
    replace_folder,
    write_replacing,
)
from rlcore.runners.progress import Progress
from rlcore.workers.files.state_files import CheckpointWriteError, write_failure

DRIVER_FILE = "driver.json"
MANIFEST_FILE = "manifest.json"

# Keys that may differ between a run and its resumption: they do not change what is computed.
# The cluster may change too, as long as every component keeps its number of ranks (checked
# against the checkpoint): each rank's state is its own, wherever the rank runs.
RESUME_FREE_KEYS = {
    "runner.resume_dir",
    "runner.progress",
    "runner.run_name",
    "runner.output_dir",
    "runner.total_env_steps",
    "runner.total_iterations",
    "runner.checkpoint_every",
    "runner.val_every",
    "runner.dry_run",
    "logger.tensorboard",
    "logger.wandb",
    "runner.resume",
    "runner.resume_changed_data",
    "runner.keep_checkpoints",
    "env.checkpoint_state",
    "logger.console",
    "runner.max_restarts",
    "runner.max_skipped_steps",
    "cluster.collective_timeout_s",
    "cluster.worker_timeout_s",
    "reward.rules.num_processes",
    "runner.val_n",
    "runner.log_val_generations",
    "rollout.val_temperature",
    "rollout.val_top_p",
    "rollout.val_top_k",
    "cluster.network_interface",
    "env.step_timeout_s",
    *(f"{c}.group_name" for c in ("actor", "critic", "rollout", "reward", "env")),
    "cluster.num_nodes",
    "cluster.devices_per_node",
    "cluster.device",
    "cluster.address",
    "cluster.component_placement",
    "cluster.fuse_collocated",
}


def checkpoint_to_resume(config: Any, quiet: bool = False) -> Path | None:
    """``runner.resume_dir``'s checkpoint; with ``runner.resume=auto`` the newest complete one of
    OUTPUT_DIR/RUN_NAME (None when it has none yet); else None. ``quiet``: the checkpoints
    skipped are not said (the dry run: the run says them)."""
    run = config.runner
    if run.resume_dir:
        return find_checkpoint(run.resume_dir, quiet=quiet)
    if run.resume == "auto":
        folder = Path(run.output_dir) / run.run_name
        found = newest_complete(folder, quiet) if folder.is_dir() else None
        if found is None and _checkpoints(folder):  # (a crash mid-write leaves no such folder)
            raise ConfigError(
                f"runner.resume=auto: no checkpoint of {folder} is complete (each is named "
                "above), and starting over would replace them; to start over, move or delete "
                f"{folder / 'checkpoints'}, or give runner.resume_dir a checkpoint to continue"
            )
        return found
    return None


def check_run_folder(config: Any, folder: Path | None = None) -> None:
    """Refuse to start a new run in a folder that already holds one (its checkpoints and
    metrics would mix with this run's, and a later resume could pick the other run's): a run
    reuses its folder only to continue it (``runner.resume=auto`` or ``runner.resume_dir``)."""
    run = config.runner
    _check_output_dir(Path(run.output_dir))
    if run.resume == "auto" or run.resume_dir:
        return
    if folder is None:
        if run.run_name is None:
            return  # a fresh timestamped name
        folder = Path(run.output_dir) / run.run_name
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"runner.output_dir: {folder} is a file, not a folder for the run")
    if folder.is_dir() and any(folder.iterdir()):
        raise ConfigError(
            f"runner.run_name: {folder} already holds a run; pick another run_name, or continue "
            "that run with runner.resume=auto"
        )


def _check_output_dir(output_dir: Path) -> None:
    """``runner.output_dir`` is a folder this process can make run folders in, or does not
    exist yet under one (it is created)."""
    for path in (output_dir, *output_dir.parents):
        if not path.exists():
            continue
        if not path.is_dir():
            raise ConfigError(
                f"runner.output_dir: {path} is a file, so {output_dir} cannot be a folder for "
                "runs; point runner.output_dir at a folder (it is created if missing)"
            )
        if not os.access(path, os.W_OK | os.X_OK):
            raise ConfigError(
                f"runner.output_dir: {path} is not writable by this user, so no run folder can "
                f"be made in {output_dir}; point runner.output_dir at a writable folder"
            )
        return


def open_run_folder(config: Any, default_name: str) -> tuple[Path, Path | None]:
    """The run folder (created, with ``config.json``) and the checkpoint to resume from, if any
    (``checkpoint_to_resume``): the run folder is then the checkpoint's. A folder holding
    another run is refused (``check_run_folder``)."""
    run = config.runner
    checkpoint = checkpoint_to_resume(config)
    if checkpoint is not None:
        run_dir = checkpoint.parent.parent
    elif run.run_name is not None:
        run_dir = Path(run.output_dir) / run.run_name
    else:  # a fresh name: NAME-sSEED-TIMESTAMP, -2, -3, ... when runs start in the same second
        stamp = (
            Path(run.output_dir) / f"{default_name}-s{run.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
        )
        run_dir, number = stamp, 1
        while run_dir.exists():
            number += 1
            run_dir = stamp.with_name(f"{stamp.name}-{number}")
    check_run_folder(config, run_dir)
    check_no_links(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as error:
        where = f"cannot make the run folder {run_dir}: {error}"
        raise ConfigError(f"runner.output_dir: {where}") from None
    lock_run_folder(run_dir)  # held until the driver closes
    write_replacing(run_dir / "config.json", json.dumps(dataclasses.asdict(config), indent=2))
    return run_dir, checkpoint


@contextlib.contextmanager
def written_atomically(directory: Path) -> Iterator[Path]:
    """A fresh temporary folder to fill; when the block ends without error its files are
    flushed to disk, the manifest is written last, and the folder is renamed to ``directory``
    (``replace_folder``): a crash mid-write leaves the previous checkpoint whole. A write that
    fails (a full disk, a file-size limit) removes the temporary folder and is a
    ``CheckpointWriteError`` naming the file, in one line: the run stops rather than go on
    with checkpoints it could not write."""
    tmp = directory.with_name(directory.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        try:
            yield tmp
            write_manifest(tmp)
        except OSError as error:  # (a write no component named: driver.json, the manifest)
            raise write_failure(tmp, error) from None
    except CheckpointWriteError as error:
        shutil.rmtree(tmp, ignore_errors=True)  # (what it holds is unusable, and takes space)
        raise CheckpointWriteError(
            f"{error} (checkpoint {directory.name} was not written; the run stopped, and the "
            "checkpoints before it are as they were)"
        ) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    replace_folder(tmp, directory)


def write_manifest(folder: Path) -> None:
    """``manifest.json``: every file of ``folder`` with its size and sha256, each file flushed
    to disk first."""
    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        with path.open("rb") as f:
            os.fsync(f.fileno())
        rel = str(path.relative_to(folder))
        files[rel] = {"bytes": path.stat().st_size, "sha256": file_sha256(path)}
    with (folder / MANIFEST_FILE).open("w") as f:
        json.dump({"files": files}, f, indent=1)
        f.flush()
        os.fsync(f.fileno())


def check_manifest(checkpoint: Path) -> str | None:
    """What is wrong with ``checkpoint``'s files against its manifest, or None if nothing."""
    manifest = checkpoint / MANIFEST_FILE
    if not manifest.is_file():
        return f"{manifest} is missing (the checkpoint was not finished)"
    try:
        files = json.loads(manifest.read_text())["files"]
    except (ValueError, KeyError, TypeError):
        return f"{manifest} is not a readable manifest"
    link = first_link(checkpoint)
    if link is not None:
        return f"{link} is a link, which no checkpoint holds: it is not followed"
    for path in sorted(p for p in checkpoint.rglob("*") if not p.is_dir()):
        if str(path.relative_to(checkpoint)) not in files and path.name != MANIFEST_FILE:
            return f"{path} is not in the manifest (added after the checkpoint was written)"
    for rel, entry in files.items():
        path = checkpoint / rel
        if not path.is_file():
            return f"{path} is missing"
        if path.stat().st_size != entry["bytes"]:
            return f"{path} has {path.stat().st_size} bytes, the manifest says {entry['bytes']}"
        if file_sha256(path) != entry["sha256"]:
            return f"{path} differs from the file that was written (sha256)"
    return None


def newest_complete(run_dir: Path, quiet: bool = False) -> Path | None:
    """The newest checkpoint of ``run_dir`` whose files match its manifest; each newer broken
    one is skipped, and said unless ``quiet``."""
    for checkpoint in reversed(_checkpoints(run_dir)):
        problem = check_manifest(checkpoint)
        if problem is None:
            return checkpoint
        if not quiet:
            warn(f"skipped checkpoint {checkpoint.name}: {problem}")
    return None


def _checkpoints(run_dir: Path) -> list[Path]:
    """The run's checkpoint folders, oldest first (temporary ``.tmp`` folders excluded)."""
    found = (run_dir / "checkpoints").glob("iter_*[0-9]") if run_dir.is_dir() else []
    return sorted(p for p in found if p.is_dir())


def remove_old_checkpoints(run_dir: Path, keep: int | None) -> None:
    """All but the newest ``keep`` checkpoints (None: keep all)."""
    if keep is not None:
        for old in _checkpoints(run_dir)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)


def save_checkpoint(
    run_dir: Path,
    config: Any,
    progress: Progress,
    components: dict[str, Any],
    world_sizes: dict[str, int],
    driver_state: dict[str, Any],
) -> Path:
    """Every component's folder, then ``driver.json``; returns the checkpoint folder."""
    where = run_dir / "checkpoints" / f"iter_{progress.iteration:06d}"
    with written_atomically(where) as tmp:
        for name, component in components.items():
            component.save_checkpoint(str((tmp / name).resolve()))
        driver = {
            "config": dataclasses.asdict(config),
            "progress": dataclasses.asdict(progress),
            "world_sizes": world_sizes,
            "state": driver_state,
        }
        (tmp / DRIVER_FILE).write_text(json.dumps(driver))
    remove_old_checkpoints(run_dir, config.runner.keep_checkpoints)
    return where


def load_checkpoint(
    checkpoint: Path,
    config: Any,
    components: dict[str, Any],
    world_sizes: dict[str, int],
) -> tuple[Progress, dict[str, Any]]:
    """Load every component from ``checkpoint``; the saved ``Progress`` and driver state."""
    driver = json.loads((checkpoint / DRIVER_FILE).read_text())
    check_resumable(driver, config, checkpoint, world_sizes)
    for name, component in components.items():
        component.load_checkpoint(str((checkpoint / name).resolve()))
    return Progress(**driver["progress"]), driver["state"]


def check_resumable(
    driver: dict[str, Any], config: Any, checkpoint: Path, world_sizes: dict[str, int]
) -> None:
    """``checkpoint`` (its ``driver.json`` read as ``driver``) continues ``config`` on a placement
    with ``world_sizes`` ranks per component; ``ConfigError`` naming what differs if not."""
    check_same_run(driver["config"], dataclasses.asdict(config), checkpoint)
    saved_data = driver["state"].get("data")  # (a reasoning run's; none before rlcore 0.2)
    if saved_data is not None and not config.runner.resume_changed_data:
        changed = changed_files(saved_data, data_files(config))
        if changed:
            raise ConfigError(
                f"{changed[0]}: {checkpoint} cannot be resumed on other data; resume on the same "
                "files, or set runner.resume_changed_data=true to go on with these (the summary "
                "says so)"
            )
    done, target = driver["progress"]["iteration"], config.derived.iterations
    # A re-launch (runner.resume=auto) of a run that has finished finds nothing left to do.
    if done > target or (done == target and config.runner.resume != "auto"):
        key = "total_env_steps" if config.mode == "embodied" else "total_iterations"
        raise ConfigError(
            f"runner.{key}: {checkpoint} has already trained {done} iterations, and this "
            f"config stops at {target}: nothing would be trained; raise runner.{key} to go on"
        )
    if driver["world_sizes"] != world_sizes:
        raise ConfigError(
            f"runner.resume_dir: {checkpoint} was written by {driver['world_sizes']} ranks per "
            f"component, this placement has {world_sizes}; resume with as many ranks of each"
        )


def data_files(config: Any) -> dict[str, tuple[str, ...]]:
    """The data files a reasoning run reads, by key (none for the synthetic task)."""
    return {"data.train_files": config.data.train_files, "data.val_files": config.data.val_files}


def find_checkpoint(path: str, key: str = "runner.resume_dir", quiet: bool = False) -> Path:
    """``path`` itself if it is a checkpoint (refused, naming the file, if its files disagree
    with its manifest), else the newest complete checkpoint of the run at ``path``; ``key``:
    what gave ``path``, named in a refusal; ``quiet``: as in ``newest_complete``."""
    where = Path(path)
    use = "exported" if key == "export" else "resumed"
    if (where / DRIVER_FILE).is_file() or (where / MANIFEST_FILE).is_file():
        problem = check_manifest(where)
        if problem is not None:
            raise ConfigError(f"{key}: {where} cannot be {use}: {problem}")
        return where
    found = newest_complete(where, quiet)
    if found is None:
        raise ConfigError(
            f"{key}: no complete checkpoint at {path} (give RUN/checkpoints/iter_K, "
            "or a run folder that has checkpoints)"
        )
    return found


def _flatten(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict) and key != "component_placement":
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def check_same_run(saved: dict, current: dict, checkpoint: Path) -> None:
    """Refuse to resume with a config that computes something else, naming the keys. ``saved``
    may be an earlier version's (``current_keys`` reads it in this version's keys); a key that
    version did not have stood for its default."""
    as_json = lambda tree: json.loads(json.dumps(tree))  # noqa: E731  (tuples as lists)
    before, now = _flatten(as_json(current_keys(saved))), _flatten(as_json(current_keys(current)))
    defaults = as_json(schema_defaults(SCHEMAS[current["mode"]]))
    before |= {k: defaults[k] for k in now.keys() - before.keys() if k in defaults}
    changed = sorted(
        k
        for k in before.keys() | now.keys()
        if k not in RESUME_FREE_KEYS and before.get(k) != now.get(k)
    )
    if changed:
        raise ConfigError(
            f"runner.resume_dir: {checkpoint} was trained with other values of "
            f"{', '.join(changed[:5])}; resume with the same config (only "
            f"{', '.join(sorted(RESUME_FREE_KEYS))} may change)"
        )
