"""Checkpoints that resume a run exactly: weights, optimiser, RNG, counters and the envs.

A checkpoint is a folder ``RUN/checkpoints/iter_000K``:
- ``model.safetensors``: the weights (safetensors; shared tensors such as a shared trunk are
  handled by ``save_model``);
- ``state.pt``: optimiser state, torch RNG state, counters and the rollout's carry-over
  (current observations, episode accumulators);
- ``envs.pkl``: the vector env itself (cloudpickle), so a resumed run steps the same episodes.

It is written to a temporary folder and renamed into place, so a crash mid-write leaves the
previous checkpoint intact.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from ray import cloudpickle
from safetensors.torch import load_model, save_model

from rlcore.config.errors import ConfigError


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
    directory: Path, model: torch.nn.Module, state: dict[str, Any], envs: Any
) -> Path:
    with written_atomically(directory) as tmp:
        save_model(model, str(tmp / "model.safetensors"))
        torch.save(state, tmp / "state.pt")
        (tmp / "envs.pkl").write_bytes(cloudpickle.dumps(envs))
    return directory


def check_envs_can_be_saved(envs: Any, env_id: str) -> None:
    """Fail before training, not at the first checkpoint, when the envs cannot be pickled
    (subprocess envs, simulators holding native handles such as SAPIEN's)."""
    try:
        cloudpickle.dumps(envs)
    except Exception as error:  # pickling raises whatever the object's reducer raises
        raise ConfigError(
            f"runner.checkpoint_every: the envs of {env_id} cannot be saved in a checkpoint "
            f"({type(error).__name__}: {str(error)[:120]}); set runner.checkpoint_every=0, or "
            "env.vector_mode=sync if the env itself can be pickled"
        ) from None


def find_checkpoint(path: str) -> Path:
    """``path`` itself if it is a checkpoint, else the latest checkpoint of the run at ``path``."""
    where = Path(path)
    if (where / "state.pt").is_file():
        return where
    found = sorted((where / "checkpoints").glob("iter_*[0-9]")) if where.is_dir() else []
    if not found:
        raise ConfigError(
            f"runner.resume_dir: no checkpoint at {path} (give RUN/checkpoints/iter_K, or a run "
            "folder that has checkpoints)"
        )
    return found[-1]


def load_checkpoint(directory: Path, model: torch.nn.Module) -> tuple[dict[str, Any], Any]:
    """Load the weights into ``model``; return the saved state and the envs."""
    load_model(model, str(directory / "model.safetensors"))
    state = torch.load(directory / "state.pt", weights_only=False)
    envs = cloudpickle.loads((directory / "envs.pkl").read_bytes())
    return state, envs


# Keys that may differ between a run and its resumption: they do not change what is computed.
RESUME_FREE_KEYS = {"runner.resume_dir", "runner.progress", "runner.run_name", "runner.output_dir",
                    "runner.total_env_steps", "runner.total_iterations", "runner.checkpoint_every",
                    "runner.val_every", "logger.tensorboard",
                    "logger.wandb"}  # fmt: skip


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
