"""Checkpoints of reasoning runs: ``RUN/checkpoints/iter_000K`` with ``actor.safetensors`` and
``critic.safetensors`` (written by rank 0 of each), their optimiser states, and ``state.pt``
(the driver's RNG or the rollout ranks' sampling RNGs, the KL coefficient, the data order,
counters). Written to a temporary folder and renamed into place, so a crash mid-write leaves the
previous checkpoint whole. A resumed run continues exactly where the saved one stopped; with
several processes on several machines the run folder must be on storage they share.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from rlcore.runners.checkpoint import check_same_run, find_checkpoint, written_atomically

if TYPE_CHECKING:
    from rlcore.runners.reasoning import ReasoningRunner

__all__ = ["find_checkpoint", "load_state", "save_state"]


def save_state(runner: ReasoningRunner) -> Path:
    where = runner.run_dir / "checkpoints" / f"iter_{runner.progress['iteration']:06d}"
    with written_atomically(where) as tmp:
        kept = runner.components.save(str(tmp.resolve()))
        state = {
            "config": dataclasses.asdict(runner.config),
            "progress": runner.progress,
            "queue": runner.queue,
            "order": runner.order.bit_generator.state,
            "kl_ctrl": runner.kl_ctrl.state_dict(),
            "driver_rng": torch.get_rng_state(),
            "components": kept,
        }
        torch.save(state, tmp / "state.pt")
    return where


def load_state(checkpoint: Path, runner: ReasoningRunner) -> None:
    state = torch.load(checkpoint / "state.pt", weights_only=False)
    check_same_run(state["config"], dataclasses.asdict(runner.config), checkpoint)
    torch.set_rng_state(state["driver_rng"])
    runner.components.load(str(checkpoint.resolve()), state["components"])
    runner.progress = state["progress"]
    runner.queue = state["queue"]
    runner.order.bit_generator.state = state["order"]
    runner.kl_ctrl.load_state_dict(state["kl_ctrl"])
