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

import shutil
from pathlib import Path
from typing import Any

import torch
from ray import cloudpickle
from safetensors.torch import load_model, save_model

from rlcore.config.errors import ConfigError


def save_checkpoint(
    directory: Path, model: torch.nn.Module, state: dict[str, Any], envs: Any
) -> Path:
    tmp = directory.with_name(directory.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_model(model, str(tmp / "model.safetensors"))
    torch.save(state, tmp / "state.pt")
    (tmp / "envs.pkl").write_bytes(cloudpickle.dumps(envs))
    shutil.rmtree(directory, ignore_errors=True)
    tmp.rename(directory)
    return directory


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
