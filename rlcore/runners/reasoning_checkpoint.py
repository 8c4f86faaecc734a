"""Checkpoints of reasoning runs: ``RUN/checkpoints/iter_000K`` with ``actor.safetensors`` (and
``critic.safetensors``) plus ``state.pt`` (optimisers, RNGs, the KL coefficient, the data order,
counters). Written to a temporary folder and renamed into place, so a crash mid-write leaves the
previous checkpoint whole. A resumed run continues exactly where the saved one stopped.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import load_model, save_model

from rlcore.config.errors import ConfigError
from rlcore.runners.checkpoint import check_same_run, find_checkpoint

if TYPE_CHECKING:
    from rlcore.runners.reasoning import ReasoningRunner

__all__ = ["find_checkpoint", "load_state", "save_state"]


def _trainers(runner: ReasoningRunner) -> dict[str, Any]:
    state = getattr(runner.components, "state", None)
    if state is None:
        raise ConfigError(
            "runner.checkpoint_every: checkpoints of runs spread over several processes are not "
            "built yet; set runner.checkpoint_every=0 (and no runner.resume_dir)"
        )
    return state()


def save_state(runner: ReasoningRunner) -> Path:
    where = runner.run_dir / "checkpoints" / f"iter_{runner.progress['iteration']:06d}"
    tmp = where.with_name(where.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    trainers = _trainers(runner)
    for name, trainer in trainers.items():
        save_model(trainer.model, str(tmp / f"{name}.safetensors"))
    state = {
        "config": dataclasses.asdict(runner.config),
        "progress": runner.progress,
        "queue": runner.queue,
        "order": runner.order.bit_generator.state,
        "kl_ctrl": runner.kl_ctrl.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "trainers": {
            name: {
                "optimizer": t.optimizer.state_dict(),
                "shuffle": t.shuffle.get_state(),
                "steps": t.steps,
            }
            for name, t in trainers.items()
        },
    }
    torch.save(state, tmp / "state.pt")
    shutil.rmtree(where, ignore_errors=True)
    tmp.rename(where)
    return where


def load_state(checkpoint: Path, runner: ReasoningRunner) -> None:
    state = torch.load(checkpoint / "state.pt", weights_only=False)
    check_same_run(state["config"], dataclasses.asdict(runner.config), checkpoint)
    for name, trainer in _trainers(runner).items():
        load_model(trainer.model, str(checkpoint / f"{name}.safetensors"))
        saved = state["trainers"][name]
        trainer.optimizer.load_state_dict(saved["optimizer"])
        trainer.shuffle.set_state(saved["shuffle"])
        trainer.steps = saved["steps"]
    runner.progress = state["progress"]
    runner.queue = state["queue"]
    runner.order.bit_generator.state = state["order"]
    runner.kl_ctrl.load_state_dict(state["kl_ctrl"])
    torch.set_rng_state(state["torch_rng"])
