"""One run folder and one checkpoint layout for both modes; a resumed run continues bit for bit.

    RUN/config.json, RUN/summary.json, RUN/tensorboard/
    RUN/checkpoints/iter_000010/
        driver.json          the config, the ``Progress``, the driver's own state, world sizes
        actor/               model.safetensors (rank 0), trainer_rank{r}.pt (optimiser, schedule,
                             shuffle) of every rank
        critic/ ...          likewise
        rollout/rank{r}.pt   each rank's sampling RNG
        env/                 each rank's carry-over (rank{r}.pt) and pickled envs

Each component writes its own folder (``save_checkpoint(dir)``, every rank its own files), so a
component placed in another process writes where it runs: on several machines the run folder
must be on storage they share. A checkpoint is written to a temporary folder and renamed into
place, so a crash mid-write leaves the previous one whole.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlcore.config.errors import ConfigError
from rlcore.runners.progress import Progress

DRIVER_FILE = "driver.json"

# Keys that may differ between a run and its resumption: they do not change what is computed.
# The cluster may change too, as long as every component keeps its number of ranks (checked
# against the checkpoint): each rank's state is its own, wherever the rank runs.
RESUME_FREE_KEYS = {"runner.resume_dir", "runner.progress", "runner.run_name", "runner.output_dir",
                    "runner.total_env_steps", "runner.total_iterations", "runner.checkpoint_every",
                    "runner.val_every", "runner.dry_run", "logger.tensorboard", "logger.wandb",
                    "logger.console",
                    *(f"{c}.group_name" for c in ("actor", "critic", "rollout", "reward", "env")),
                    "cluster.num_nodes", "cluster.devices_per_node", "cluster.device",
                    "cluster.address", "cluster.component_placement",
                    "cluster.fuse_collocated"}  # fmt: skip


def open_run_folder(config: Any, default_name: str) -> tuple[Path, Path | None]:
    """The run folder (created, with ``config.json``) and the checkpoint to resume from, if any:
    ``runner.resume_dir``'s, whose run folder is then this run's."""
    run = config.runner
    checkpoint = find_checkpoint(run.resume_dir) if run.resume_dir else None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = run.run_name or f"{default_name}-s{run.seed}-{stamp}"
    run_dir = checkpoint.parent.parent if checkpoint else Path(run.output_dir) / name
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps(dataclasses.asdict(config), indent=2))
    return run_dir, checkpoint


@contextlib.contextmanager
def written_atomically(directory: Path) -> Iterator[Path]:
    """A fresh temporary folder to fill, renamed to ``directory`` when the block ends without
    error: a crash mid-write leaves the previous checkpoint whole."""
    tmp = directory.with_name(directory.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    yield tmp
    shutil.rmtree(directory, ignore_errors=True)
    tmp.rename(directory)


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
    if driver["world_sizes"] != world_sizes:
        raise ConfigError(
            f"runner.resume_dir: {checkpoint} was written by {driver['world_sizes']} ranks per "
            f"component, this placement has {world_sizes}; resume with as many ranks of each"
        )


def find_checkpoint(path: str) -> Path:
    """``path`` itself if it is a checkpoint, else the latest checkpoint of the run at ``path``."""
    where = Path(path)
    if (where / DRIVER_FILE).is_file():
        return where
    found = sorted((where / "checkpoints").glob("iter_*[0-9]")) if where.is_dir() else []
    if not found:
        raise ConfigError(
            f"runner.resume_dir: no checkpoint at {path} (give RUN/checkpoints/iter_K, or a run "
            "folder that has checkpoints)"
        )
    return found[-1]


def _flatten(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict) and key != "component_placement":
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def check_same_run(saved: dict, current: dict, checkpoint: Path) -> None:
    """Refuse to resume with a config that computes something else, naming the keys."""
    before, now = _flatten(saved), _flatten(current)
    changed = sorted(k for k in before.keys() | now.keys()
                     if k not in RESUME_FREE_KEYS and before.get(k) != now.get(k))  # fmt: skip
    if changed:
        raise ConfigError(
            f"runner.resume_dir: {checkpoint} was trained with other values of "
            f"{', '.join(changed[:5])}; resume with the same config (only "
            f"{', '.join(sorted(RESUME_FREE_KEYS))} may change)"
        )
