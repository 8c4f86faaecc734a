"""Embodied PPO over data-parallel ranks: every rank hosts env, rollout and actor (fused), steps
its share of the envs and updates through DDP; this driver runs the loop (``loop.train``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path

from rlcore.config.errors import ConfigError
from rlcore.config.schema import EmbodiedConfig
from rlcore.placement import PlacementPlan
from rlcore.runners.embodied import make_rank
from rlcore.runners.loop import new_progress, run_name, train
from rlcore.scheduler import Scheduler


def check_data_parallel(config: EmbodiedConfig, plan: PlacementPlan) -> None:
    """What this driver can run: env, rollout and actor fused, no checkpoints yet."""
    fused = {"actor", "rollout", "env"}
    if not any(fused <= set(group) for group in plan.fused):
        raise ConfigError(
            "cluster.component_placement: embodied runs over several processes need env, "
            "rollout and actor placed together (e.g. cluster.component_placement="
            "{env:0-1,rollout:0-1,actor:0-1}); disaggregated layouts: issue #4"
        )
    world = plan.world_size("actor")
    if config.env.num_envs % world:
        raise ConfigError(
            f"env.num_envs: {config.env.num_envs} envs cannot be shared by {world} actor ranks; "
            f"use a multiple of {world}"
        )
    if config.runner.checkpoint_every or config.runner.resume_dir:
        raise ConfigError(
            "runner.checkpoint_every: checkpoints of multi-rank embodied runs are not built yet; "
            "set runner.checkpoint_every=0 (and no runner.resume_dir)"
        )


def run_data_parallel(config: EmbodiedConfig, plan: PlacementPlan) -> dict:
    check_data_parallel(config, plan)
    run_dir = Path(config.runner.output_dir) / run_name(config)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps(dataclasses.asdict(config), indent=2))
    with Scheduler(plan, address=config.cluster.address) as scheduler:
        ranks = scheduler.launch("actor", make_rank, config)
        try:
            return train(
                config,
                iterate=lambda i: ranks.call_all("iterate", i)[0],  # rank 0's metrics
                evaluate=lambda seed: ranks.call_rank(0, "evaluate", seed),
                save=None,
                run_dir=run_dir,
                progress=new_progress(),
                ranks=ranks.world_size,
            )
        finally:
            # Close the ranks' envs (async ones own subprocesses); if a rank already failed,
            # its error is the one to see, not this one's.
            with contextlib.suppress(Exception):
                ranks.call_all("close")
