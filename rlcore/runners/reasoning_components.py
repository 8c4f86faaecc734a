"""The reasoning run's components, called the same way whether they live in this process or in
Ray workers placed by ``cluster.component_placement``.

``call(name, method, batch)`` splits ``batch`` over the component's ranks, runs ``method`` on each
shard, and merges the results in rank order (tensors concatenated, lists joined, counts summed;
an update's metrics are averaged over ranks). ``sync()`` copies the actor's weights into the
rollout engine.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from rlcore.config.errors import ConfigError
from rlcore.config.schema import ReasoningConfig
from rlcore.models.warmup import ModelDirs
from rlcore.placement import PlacementPlan
from rlcore.rewards import RewardWorker
from rlcore.workers.lm_actor import LMActor, LMCritic, LMReference
from rlcore.workers.lm_batch import Batch, split
from rlcore.workers.rollout import make_rollout

TRAINED = ("actor", "critic")  # the components a checkpoint holds weights and optimisers of
FACTORIES = {"actor": LMActor, "critic": LMCritic, "ref": LMReference, "reward": RewardWorker}


def merge(results: list[Any]) -> Any:
    """One result from the ranks' results, in rank order."""
    first = results[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(results)
    if isinstance(first, dict):
        if all(isinstance(v, float) for v in first.values()):  # update metrics
            return {k: sum(r[k] for r in results) / len(results) for k in first}
        return {k: merge([r[k] for r in results]) for k in first}
    if isinstance(first, list):
        return [item for r in results for item in r]
    if isinstance(first, int):
        return sum(results)
    return first


class LocalComponents:
    """Every component in this process; the rollout engine shares the actor's module."""

    def __init__(
        self, config: ReasoningConfig, dirs: ModelDirs, plan: PlacementPlan, placed: set[str]
    ) -> None:
        from rlcore.scheduler.worker import WorkerContext

        self.ranks = dict.fromkeys(placed, 1)
        ctx = WorkerContext(component="all", rank=0, world_size=1, local_rank=0, node=0,
                            devices=(0,), device=plan.device)  # fmt: skip
        self.objects: dict[str, Any] = {"actor": LMActor(ctx, config, dirs.actor)}
        self.objects["rollout"] = make_rollout(
            ctx, config, dirs.actor, model=self.objects["actor"].model
        )
        if "critic" in placed:
            self.objects["critic"] = LMCritic(ctx, config, dirs.critic)
        if "ref" in placed:
            self.objects["ref"] = LMReference(ctx, config, dirs.actor)
        self.objects["reward"] = RewardWorker(ctx, config, dirs.actor)

    def call(self, name: str, method: str, batch: Batch, **kwargs: Any) -> Any:
        return getattr(self.objects[name], method)(batch, **kwargs)

    def sync(self) -> float:
        return 0.0  # one module serves both

    def save(self, directory: str) -> dict[str, Any]:
        """Write the trained models and optimisers; return the rest to keep (RNG states)."""
        for name in TRAINED:
            if name in self.objects:
                self.objects[name].save(directory, name)
        return {"torch_rng": torch.get_rng_state()}

    def load(self, directory: str, kept: dict[str, Any]) -> None:
        for name in TRAINED:
            if name in self.objects:
                self.objects[name].load(directory, name)
        torch.set_rng_state(kept["torch_rng"])

    def close(self) -> None:
        pass


class RayComponents:
    """Components in Ray workers; rank r of a component gets the r-th shard of each batch."""

    def __init__(
        self, config: ReasoningConfig, dirs: ModelDirs, plan: PlacementPlan, placed: set[str]
    ) -> None:
        from rlcore.scheduler import Scheduler

        self.scheduler = Scheduler(plan, address=config.cluster.address)
        self.scheduler.start()
        try:
            self.groups = {}
            for name in sorted(placed):
                model_dir = dirs.critic if name == "critic" else dirs.actor
                factory = make_rollout if name == "rollout" else FACTORIES[name]
                self.groups[name] = self.scheduler.launch(name, factory, config, model_dir)
            self.ranks = {name: g.world_size for name, g in self.groups.items()}
        except BaseException:
            self.scheduler.shutdown()
            raise

    def call(self, name: str, method: str, batch: Batch, **kwargs: Any) -> Any:
        group = self.groups[name]
        return merge(group.scatter(method, split(batch, group.world_size), **kwargs))

    def sync(self) -> float:
        start = time.perf_counter()
        self.scheduler.sync_weights("actor", "rollout")
        return time.perf_counter() - start

    def save(self, directory: str) -> dict[str, Any]:
        for name in TRAINED:
            if name in self.groups:
                self.groups[name].call_all("save", directory, name)
        return {"rollout_rng": self.groups["rollout"].call_all("rng_state")}

    def load(self, directory: str, kept: dict[str, Any]) -> None:
        for name in TRAINED:
            if name in self.groups:
                self.groups[name].call_all("load", directory, name)
        self.sync()  # the rollout holds the weights it had at the checkpoint: the actor's
        rollout = self.groups["rollout"]
        for rank, state in enumerate(kept["rollout_rng"]):
            rollout.call_rank(rank, "set_rng_state", state)

    def close(self) -> None:
        self.scheduler.shutdown()


def check_placement(config: ReasoningConfig, plan: PlacementPlan, placed: set[str]) -> None:
    """Every rank of every component gets whole shards: the batch sizes divide by world sizes."""
    group = config.algorithm.group_size
    responses = config.data.train_batch_size * group
    problems = []
    for name in sorted(placed):
        world = plan.world_size(name)
        if responses % world:
            problems.append(
                f"cluster.component_placement: {name} has {world} ranks, which cannot share the "
                f"{responses} responses of an iteration (data.train_batch_size x group_size)"
            )
    for name, update in (("actor", config.actor), ("critic", config.critic_update())):
        world = plan.world_size(name) if name in placed else 1
        if (update.ppo_mini_batch_size * group) % world:
            problems.append(
                f"{name}.ppo_mini_batch_size: {update.ppo_mini_batch_size} prompts x group_size "
                f"{group} cannot be shared by {world} {name} ranks; use a multiple of {world}"
            )
    if problems:
        raise ConfigError("\n".join(problems))


def runs_in_driver(config: ReasoningConfig, plan: PlacementPlan) -> bool:
    """One process and no cluster to join: every component runs here, no Ray at all."""
    return len(plan.processes()) == 1 and config.cluster.address is None


def make_components(
    config: ReasoningConfig, dirs: ModelDirs, plan: PlacementPlan, placed: set[str]
) -> LocalComponents | RayComponents:
    """In this process when the plan has one process and no cluster to join (the CPU default),
    else in Ray workers."""
    if runs_in_driver(config, plan):
        return LocalComponents(config, dirs, plan, placed)
    return RayComponents(config, dirs, plan, placed)
