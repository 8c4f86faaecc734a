"""``Driver``: what both drivers (``EmbodiedRunner``, ``ReasoningRunner``) do the same way, so
that each is only its loop: the run folder, the components started where the plan puts them,
resuming from a checkpoint, checkpoints, ``run()`` and ``close()``.

A driver subclass says which components it launches (``launch``), which of them a checkpoint
holds (``saved``), what state of its own a checkpoint keeps (``state`` / ``load_state``), and
how its loop goes (``schedule``, ``iterate``, ``evaluate``, ``summary``: see ``loop.py``).

    runner = EmbodiedRunner(config, plan)   # components started, resumed if asked
    summary = runner.run()                  # train(runner), then close()
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rlcore.log import say
from rlcore.placement import PlacementPlan
from rlcore.runners.checkpoint import load_checkpoint, open_run_folder, save_checkpoint
from rlcore.runners.files import unlock_run_folder
from rlcore.runners.loop import Schedule, train
from rlcore.runners.progress import Progress
from rlcore.scheduler.deployment import start_components


class Driver:
    """See the module docstring. ``name`` names the run folder when ``runner.run_name`` is
    null (NAME-SEED-TIMESTAMP)."""

    schedule: Schedule

    def __init__(self, config: Any, plan: PlacementPlan, name: str) -> None:
        self.config, self.plan = config, plan
        self.restarts: list[dict[str, Any]] = []  # set by the supervisor after a lost worker
        self.version = 0  # of the actor's weights: one per actor update
        self.progress = Progress()
        self.run_dir, self.resumed_from = open_run_folder(config, name)  # (and its lock)
        torch.manual_seed(config.runner.seed)  # what the components built in this process draw
        try:
            self.components = start_components(
                plan, config.cluster, config.sync, config.runner.torch_threads
            )
        except BaseException:
            unlock_run_folder(self.run_dir)
            raise
        try:
            self.launch()
            if self.resumed_from is not None:
                self.progress, state = load_checkpoint(
                    self.resumed_from, config, self.saved(), self.world_sizes()
                )
                self.load_state(state)
                say(f"resumed from {self.resumed_from} at iteration {self.progress.iteration}")
        except BaseException:
            self.close()
            raise

    # what a driver says -------------------------------------------------------------------------

    def launch(self) -> None:
        """Start the components (``self.components.launch_all``) and keep their handles."""
        raise NotImplementedError

    def saved(self) -> dict[str, Any]:
        """The components a checkpoint holds, by name."""
        raise NotImplementedError

    def state(self) -> dict[str, Any]:
        """The driver's own state a checkpoint keeps (JSON)."""
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore what ``state`` returned."""

    # shared -------------------------------------------------------------------------------------

    def schedule_of(self, **fields: Any) -> Schedule:
        """The loop's ``Schedule``: ``fields`` and the runner's checkpoints and progress bar."""
        run = self.config.runner
        return Schedule(checkpoint_every=run.checkpoint_every, show_progress=run.progress, **fields)

    def world_sizes(self) -> dict[str, int]:
        return {name: self.components.world_size(name) for name in sorted(self.plan.components)}

    def busy_seconds(self) -> dict[str, dict[int, float]]:
        """Each component's seconds in calls so far, by rank (``loop.busy_shares``)."""
        return self.components.busy_seconds()

    def sync(self) -> None:
        """The rollout gets the actor's weights of ``version`` (nothing when it holds them)."""
        self.components.sync_weights("actor", "rollout", self.version)

    def checkpoint(self) -> Path:
        return save_checkpoint(
            self.run_dir,
            self.config,
            self.progress,
            self.saved(),
            self.world_sizes(),
            self.state(),
        )

    def run(self) -> dict[str, Any]:
        """Train to the end of the schedule; the run's summary. (``supervisor.run`` is the same
        with restarts after a lost worker.)"""
        try:
            summary = train(self)
        except BaseException:
            self.close()
            raise
        self.close(keep_warm=True)
        return summary

    def close(self, wait_s: float = 10.0, keep_warm: bool = False) -> None:
        """Stop the components; ``keep_warm``: the run ended cleanly, so its processes may be
        kept for another run (``rlcore.scheduler.warm``)."""
        try:
            self.components.close(wait_s, keep_warm)
        finally:
            unlock_run_folder(self.run_dir)
