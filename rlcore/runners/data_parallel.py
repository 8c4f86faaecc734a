"""Embodied PPO over several processes: data-parallel ranks of rollout and actor (fused), each
stepping its share of the envs (in-process when env is placed with them, else through Ray to its
own env rank) and updating through DDP; this driver runs the loop (``loop.train``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path

import torch

from rlcore.config.errors import ConfigError
from rlcore.config.schema import EmbodiedConfig
from rlcore.placement import PlacementPlan
from rlcore.runners.checkpoint import check_same_run, find_checkpoint, written_atomically
from rlcore.runners.embodied import make_rank
from rlcore.runners.loop import new_progress, run_name, train
from rlcore.scheduler import Scheduler, WorkerGroup
from rlcore.workers.env_worker import EnvWorker


def check_data_parallel(config: EmbodiedConfig, plan: PlacementPlan) -> None:
    """What this driver can run: rollout and actor fused, env with them or apart rank for rank."""
    if not any({"actor", "rollout"} <= set(group) for group in plan.fused):
        raise ConfigError(
            "cluster.component_placement: rollout and actor must be placed together (e.g. "
            "'actor,rollout': 1); a rollout apart from the actor: issue #4"
        )
    world = plan.world_size("actor")
    if plan.world_size("env") != world:
        raise ConfigError(
            f"cluster.component_placement: env has {plan.world_size('env')} rank(s) and actor "
            f"{world}; each rollout rank steps the envs of one env rank, so give them as many"
        )
    if config.env.num_envs % world:
        raise ConfigError(
            f"env.num_envs: {config.env.num_envs} envs cannot be shared by {world} actor ranks; "
            f"use a multiple of {world}"
        )


def _save(ranks: WorkerGroup, config: EmbodiedConfig, progress: dict, run_dir: Path) -> Path:
    """A checkpoint of every rank (see EmbodiedRunner.save_rank) plus the driver's counters,
    written to a temporary folder and renamed into place. On several machines the run folder
    must be on storage every rank sees."""
    where = run_dir / "checkpoints" / f"iter_{progress['iteration']:06d}"
    with written_atomically(where) as tmp:
        ranks.call_all("save_rank", str(tmp.resolve()))
        torch.save({"config": dataclasses.asdict(config), "progress": progress, "ranks":
                    ranks.world_size}, tmp / "state.pt")  # fmt: skip
    return where


def _resume(ranks: WorkerGroup, config: EmbodiedConfig, checkpoint: Path) -> dict:
    state = torch.load(checkpoint / "state.pt", weights_only=False)
    check_same_run(state["config"], dataclasses.asdict(config), checkpoint)
    if state.get("ranks") != ranks.world_size:
        raise ConfigError(
            f"runner.resume_dir: {checkpoint} holds {state.get('ranks', 1)} rank(s), this plan "
            f"has {ranks.world_size}; resume with the same placement"
        )
    ranks.call_all("load_rank", str(checkpoint.resolve()))
    return state["progress"]


def run_data_parallel(config: EmbodiedConfig, plan: PlacementPlan) -> dict:
    check_data_parallel(config, plan)
    checkpoint = find_checkpoint(config.runner.resume_dir) if config.runner.resume_dir else None
    run_dir = (
        checkpoint.parent.parent
        if checkpoint
        else Path(config.runner.output_dir) / run_name(config)
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps(dataclasses.asdict(config), indent=2))
    with Scheduler(plan, address=config.cluster.address) as scheduler:
        env_handles = None
        if not any({"env", "actor"} <= set(group) for group in plan.fused):
            per_rank = config.env.num_envs // plan.world_size("env")
            env = config.env
            envs = scheduler.launch("env", EnvWorker, env.id, per_rank, env.vector_mode)
            env_handles = envs.handles
        ranks = scheduler.launch("actor", make_rank, config, env_handles)
        try:
            progress = new_progress() if checkpoint is None else _resume(ranks, config, checkpoint)
            return train(
                config,
                iterate=lambda i: ranks.call_all("iterate", i)[0],  # rank 0's metrics
                evaluate=lambda seed: ranks.call_rank(0, "evaluate", seed),
                save=lambda: _save(ranks, config, progress, run_dir),
                run_dir=run_dir,
                progress=progress,
                ranks=ranks.world_size,
            )
        finally:
            # Close the ranks' envs (async ones own subprocesses); if a rank already failed,
            # its error is the one to see, not this one's.
            with contextlib.suppress(Exception):
                ranks.call_all("close")
