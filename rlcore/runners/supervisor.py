"""A run that survives its workers: ``run(config, plan)`` trains, and when a worker process dies
(killed, out of memory, its node lost) or a collective times out, it stops every worker, starts
the placement again and resumes from the newest complete checkpoint of the run folder (from the
start when there is none yet), at most ``runner.max_restarts`` times.

    summary = run(config, plan)      # what the entry points and ``rlcore`` call

Each restart is said on stderr (the component, rank, node, cause, and the iteration resumed
from; ``node IP (ID) lost`` when its node is gone) and listed in ``summary.json``
(``restarts``, ``restart_log``). A run that loses a worker twice after the same iteration, or
more than ``max_restarts`` times, or whose plan the cluster left after a loss cannot hold,
stops with a ``RunLost`` that tells each loss and the checkpoint to resume from: restarting
again would only repeat it. A worker lost while the run first starts stops it in one line.
An exception raised by a component's code (a bug, a bad input) is not a loss: it ends the run
as before, as does any error in a plan that runs in the driver's own process (nothing there
can die alone).

Ray is started (or joined) once for all attempts, and the worker processes that survive a
loss (those that close their components within ``CLOSE_AFTER_LOSS_S``) are kept and adopted by
the next attempt (``rlcore.scheduler.warm``): a restart costs the lost processes' start-up, not
Ray's nor every worker's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlcore.config.errors import ConfigError
from rlcore.log import warn
from rlcore.placement import PlacementPlan, runs_in_driver
from rlcore.prepare import ModelDirs, prepare
from rlcore.runners.checkpoint import newest_complete
from rlcore.runners.loop import train
from rlcore.scheduler import warm
from rlcore.scheduler.errors import WorkerError, WorkerLost, is_collective_failure

# How long the surviving workers get to close their components once a peer is gone.
CLOSE_AFTER_LOSS_S = 2.0


@dataclass(frozen=True)
class Loss:
    """A worker process that is gone, or a collective that timed out: where, and why."""

    components: tuple[str, ...]
    rank: int
    node: int
    cause: str

    def describe(self) -> str:
        return f"{'+'.join(self.components)} rank {self.rank} on node {self.node}: {self.cause}"


@dataclass(frozen=True)
class Restart:
    """One restart: the loss, the last iteration finished before it, the iteration resumed
    from (0: from the start, no checkpoint yet)."""

    loss: Loss
    after_iteration: int
    resumed_from: int

    def as_dict(self) -> dict[str, Any]:
        loss = {**dataclasses.asdict(self.loss), "components": list(self.loss.components)}
        return {**loss, "after_iteration": self.after_iteration, "resumed_from": self.resumed_from}


class RunLost(RuntimeError):
    """The run lost its workers again and again: the story of each loss."""


def build_runner(config: Any, plan: PlacementPlan, models: ModelDirs | None = None) -> Any:
    """The driver of ``config``'s mode on ``plan``; a reasoning run's ``models`` are prepared
    here when not given (``rlcore.prepare``; the entry points prepare them first)."""
    if config.mode == "embodied":
        from rlcore.runners.embodied import EmbodiedRunner

        return EmbodiedRunner(config, plan)
    from rlcore.runners.reasoning import ReasoningRunner

    return ReasoningRunner(config, plan, models or prepare(config))


def run(config: Any, plan: PlacementPlan, models: ModelDirs | None = None) -> dict[str, Any]:
    """Train ``config`` on ``plan`` (with the prepared ``models`` of a reasoning run), restarting
    lost workers (see the module docstring); the run's summary."""
    models = prepare(config) if models is None else models
    if runs_in_driver(plan, config.cluster.address):
        return build_runner(config, plan, models).run()
    with _ray_session(plan, config.cluster.address):
        return Supervisor(functools.partial(build_runner, models=models), config, plan).run()


@contextlib.contextmanager
def _ray_session(plan: PlacementPlan, address: str | None) -> Iterator[None]:
    """Ray started or joined once for every attempt, and shut down after if started here."""
    import ray

    from rlcore.scheduler.ray_cluster import connect, disconnect

    owned = connect(plan, address)
    try:
        yield
    finally:
        if owned and ray.is_initialized():
            disconnect()


class Supervisor:
    """Attempts of one run: each builds the runner with ``build(config, plan)`` (resuming from
    the run folder's newest complete checkpoint after the first) and trains it to the end or to
    a loss."""

    def __init__(
        self, build: Callable[[Any, PlacementPlan], Any], config: Any, plan: PlacementPlan
    ):
        self.build, self.config, self.plan = build, config, plan
        self.restarts: list[Restart] = []
        self.run_dir: Path | None = None  # known once the first attempt has built its runner

    def run(self) -> dict[str, Any]:
        # the processes that survive a loss are kept for the next attempt (warm.py), so that a
        # restart starts only the lost ones; whatever is kept is stopped when the run ends,
        # unless the program keeps processes warm itself
        with warm.keep_processes_warm():
            return self._attempts()

    def _attempts(self) -> dict[str, Any]:
        config = self.config
        while True:
            runner = None
            try:
                runner = self.build(config, self.plan)
                self.run_dir = runner.run_dir
                runner.restarts = [r.as_dict() for r in self.restarts]
                summary = train(runner)
            except Exception as error:
                loss = self._loss(runner, error)
                if runner is not None and loss is not None:
                    runner.components.close_after_loss(CLOSE_AFTER_LOSS_S)
                elif runner is not None:
                    runner.components.close(10.0)
                if loss is None:
                    raise
                if self.run_dir is None:  # a first start has nothing to resume
                    raise RunLost(
                        f"the run lost a worker while starting: {loss.describe()}; nothing was "
                        "trained yet: start it again"
                    ) from error
                # Lost while starting again: nothing new was done since the last resume.
                done = runner.progress.iteration if runner is not None else None
                config = self._restart(config, loss, self.run_dir, done, error)
                continue
            except BaseException:  # Ctrl-C, SIGTERM: stop the workers, keep the exception
                if runner is not None:
                    runner.close()
                raise
            runner.close(keep_warm=True)
            return summary

    def _loss(self, runner: Any, error: Exception) -> Loss | None:
        """What was lost, if ``error`` comes from a loss rather than from a component's code."""
        if isinstance(error, ConfigError) or getattr(error, "user_error", None):
            return None  # a bad input, in the driver or in a worker: restarting repeats it
        if runner is not None:
            dead = runner.components.dead_processes()
            if dead:
                return Loss(*dead[0])
        if isinstance(error, WorkerLost):
            return Loss((error.component,), error.rank, error.node, error.detail)
        if isinstance(error, WorkerError) and is_collective_failure(error):
            first = error.detail.splitlines()[0]
            return Loss(
                (error.component,),
                error.rank,
                error.node,
                f"a collective failed (a peer is gone or hung): {first}",
            )
        return None

    def _restart(
        self, config: Any, loss: Loss, run_dir: Path, done: int | None, error: Exception
    ) -> Any:
        """The config of the next attempt (resume from ``run_dir``), or ``RunLost``."""
        done = (
            done if done is not None else (self.restarts[-1].resumed_from if self.restarts else 0)
        )
        limit = config.runner.max_restarts
        stop = None
        if self.restarts and self.restarts[-1].after_iteration == done:
            stop = f"lost a worker twice after iteration {done}; restarting again would repeat it"
        elif limit == 0:
            stop = "lost a worker, and runner.max_restarts=0 allows no restart"
        elif len(self.restarts) >= limit:
            lost = len(self.restarts) + 1
            stop = f"lost a worker {lost} times, more than runner.max_restarts={limit}"
        if stop is None:
            stop = _cluster_left_cannot_host(self.plan)
        if stop is not None:
            raise RunLost(self._story(stop, loss, done, _way_on(run_dir))) from error
        checkpoint = newest_complete(run_dir)
        resumed = 0 if checkpoint is None else int(checkpoint.name.removeprefix("iter_"))
        self.restarts.append(Restart(loss, done, resumed))
        where = "the start" if checkpoint is None else f"checkpoint {checkpoint.name}"
        warn(
            f"restart {len(self.restarts)} of {limit}: {loss.describe()}; it died after "
            f"iteration {done}; resuming from {where}"
        )
        runner = dataclasses.replace(
            config.runner,
            run_name=run_dir.name,
            resume="auto",
            output_dir=str(run_dir.parent),
            resume_dir=None,
        )
        return dataclasses.replace(config, runner=runner)

    def _story(self, headline: str, loss: Loss, done: int, way_on: str) -> str:
        if not self.restarts:  # (runner.max_restarts=0, or a first loss): one line
            return f"the run {headline}: {loss.describe()} (after iteration {done}); {way_on}"
        lines = [f"the run {headline}:"]
        for number, r in enumerate(self.restarts, 1):
            lines.append(
                f"  loss {number}: {r.loss.describe()} (after iteration {r.after_iteration}; "
                f"resumed from iteration {r.resumed_from})"
            )
        lines.append(f"  loss {len(self.restarts) + 1}: {loss.describe()} (after iteration {done})")
        lines.append(f"  {way_on}")
        return "\n".join(lines)


def _way_on(run_dir: Path) -> str:
    """What to do after the run stopped on a loss: resume from its newest complete checkpoint
    (named), or run it again when it has none."""
    checkpoint = newest_complete(run_dir)
    if checkpoint is None:
        return "no checkpoint was written yet: run it again (runner.max_restarts restarts it)"
    return (
        f"resume with runner.resume_dir={checkpoint} (or set runner.max_restarts to restart "
        "on a loss)"
    )


def _cluster_left_cannot_host(plan: PlacementPlan) -> str | None:
    """Why the Ray cluster left after a loss (a node lost with it) cannot hold ``plan`` (the
    check a start makes, ``pick_nodes``); None when it can, or when the run holds no Ray."""
    ray = sys.modules.get("ray")  # (not imported for it: a run without Ray has no cluster)
    if ray is None or not ray.is_initialized():
        return None
    from rlcore.scheduler.ray_cluster import SchedulerError, pick_nodes

    try:
        pick_nodes(plan)
    except SchedulerError as error:
        return f"lost a worker, and the cluster left cannot hold the plan ({error})"
    return None
