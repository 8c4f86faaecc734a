"""The cost model of one iteration for a candidate placement: what a profile measured in one
process predicts for a layout (docs/placement.md, "Choosing a placement"). Pure: no Ray, no
torch; the profile is data (``rlcore placement --profile`` measures it).

A profile holds, for each stage of the one-process iteration (the driver's stopwatch: ``sync``,
``collect``, ``update``, ... in embodied mode; ``generate``, ``reward``, the passes, the
updates in reasoning), what each component computed in it (its own seconds, calls made to other
components excluded), how many calls it received and the tensor bytes they carried; the
driver's own seconds per stage are what is left of the stage. A candidate places groups of
components on sets of slots (one process per slot and group), with a staleness bound and, in
embodied mode, a number of env pipeline stages. The model:

- a component on ``r`` ranks does ``1/r`` of its work on each (the batch is split), and a
  trained one all-reduces its gradients at each optimiser step, ``2 (r-1)/r`` of their bytes
  through the link (the link between nodes where its ranks span two), plus its latency; where
  the profile measured the stage data parallel on ``r`` ranks, what that measured beyond the
  split work stands instead (the collectives, the driver's splitting and gathering);
- a call that crosses processes costs the link's latency and its bytes over the link's
  bandwidth (with more than one process, the driver reaches every component through Ray); a
  worker's call to another worker has its own latency, on another slot or on its own (where
  the two take turns on one core); a component on ``r`` ranks takes as many calls on each,
  with ``1/r`` of the bytes;
- synchronous (staleness 0): the stages run one after the other, each the sum of its parts (the
  driver waits for each call: ``Lockstep``);
- embodied collection with env and rollout apart in ``s`` stages: per iteration
  ``max(E, R, (E + R) / s)`` where ``E`` and ``R`` are the env's and the rollout's shares (the
  env steps one stage while the rollout acts on another); with ``s = 1`` they alternate,
  ``E + R``;
- asynchronous (staleness >= 1, the rollout in processes of its own): generation (or collection)
  overlaps the rest: an iteration is ``max(G + S, T + S, L)`` with ``G`` the generation's chain,
  ``T`` the training side's (passes and updates side by side, each the slowest of its parts),
  ``S`` the weight sync, which both chains wait for (a collective: the actor sends after its
  update, the rollout takes the weights after its generation), and ``L`` the busiest slot's load
  over the iteration (work that shares a slot takes turns, the sync's included);
- the iteration's seconds outside its stages (``OTHER``: the driver's bookkeeping) are the
  driver's, on the training side.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DRIVER = "driver"

# The stage of each mode whose work the rollout (and, embodied, the env) does while the
# training side goes on, in an asynchronous run; and the weight sync's stage.
GENERATION = {"embodied": "collect", "reasoning": "generate"}
SYNC = "sync"
# Reasoning stages that an asynchronous iteration submits side by side (``Pipeline``): the
# passes, then the updates.
PASSES = ("logprob", "ref", "values")
UPDATES = ("critic_update", "actor_update", "update")
# The stage of the old log-probs' pass, which a run skips where the rollout samples with the
# actor's own module (both in one process) and the config asks for no recomputation.
LOGPROB = "logprob"
# The profile's stage for an iteration's seconds outside the driver's stopwatch (its metrics,
# queues and bookkeeping): the driver's own.
OTHER = "other"


@dataclass(frozen=True)
class Work:
    """What one component did in one stage of an iteration, measured in one process."""

    seconds: float  # its own compute; what it spent in calls to other components excluded
    calls: float = 0.0  # calls it received per iteration
    bytes: float = 0.0  # tensor bytes those calls carried, arguments and results
    caller: str = DRIVER  # who called it: the driver or another component


@dataclass(frozen=True)
class Link:
    """A call between two processes: its round trip with nothing carried (from the driver to a
    worker; from a worker to a worker on another slot, and on its own slot), and the bandwidth.
    A worker's latencies default to the driver's."""

    latency_s: float
    bytes_per_s: float
    peer_latency_s: float | None = None
    same_slot_latency_s: float | None = None
    inter_node_bytes_per_s: float | None = None  # between nodes (None: bytes_per_s)

    def seconds(
        self, calls: float, nbytes: float, latency_s: float | None = None, nodes: bool = False
    ) -> float:
        """``calls`` round trips carrying ``nbytes`` in all; ``nodes``: between two nodes."""
        latency = self.latency_s if latency_s is None else latency_s
        rate = self.bytes_per_s
        if nodes and self.inter_node_bytes_per_s is not None:
            rate = self.inter_node_bytes_per_s
        return calls * latency + nbytes / rate

    def between_workers(self, same_slot: bool) -> float:
        """A call's round trip from one worker to another."""
        peer = self.latency_s if self.peer_latency_s is None else self.peer_latency_s
        if same_slot and self.same_slot_latency_s is not None:
            return self.same_slot_latency_s
        return peer


@dataclass(frozen=True)
class Profile:
    """One configuration's iteration measured in one process (``torch_threads`` threads)."""

    mode: str  # embodied | reasoning
    threads: int
    stages: Mapping[str, float]  # the iteration's seconds per stage (the driver's stopwatch)
    work: Mapping[str, Mapping[str, Work]]  # stage -> component -> its work there
    link: Link
    weight_bytes: float = 0.0  # the actor's weights: what a sync carries
    grad_steps: Mapping[str, float] = field(default_factory=dict)  # optimiser steps / iteration
    grad_bytes: Mapping[str, float] = field(default_factory=dict)  # a component's gradients
    reuses_log_probs: bool = False  # one process skips the old log-probs' pass (see LOGPROB)
    # measured with every component in a process of its own (``rlcore.runners.profiling``):
    # stage -> wall s per call (sync, other: per iteration)
    transit: Mapping[str, float] = field(default_factory=dict)
    call_cpu: Mapping[str, float] = field(default_factory=dict)  # who -> CPU s per call
    cores: int = 0  # CPU slots the processes share (0: not CPU-bound, e.g. GPUs)
    # measured with every component on parallel_ranks slots (data parallel): per stage, the
    # seconds beyond the model's without all-reduces (the collectives, splitting, gathering)
    parallel: Mapping[str, float] = field(default_factory=dict)
    parallel_ranks: int = 0

    def driver_seconds(self, stage: str) -> float:
        """The stage's time that no component's calls account for: the driver's own work."""
        spent = sum(w.seconds for w in self.work.get(stage, {}).values())
        return max(self.stages.get(stage, 0.0) - spent, 0.0)


@dataclass(frozen=True)
class Candidate:
    """A layout: ``groups`` of components, each on its slots (one process per slot, shared by
    the group's components unless ``fused`` is false: ``cluster.fuse_collocated``), with the
    run's staleness bound, env pipeline stages (embodied) and torch threads per process."""

    groups: tuple[tuple[tuple[str, ...], tuple[int, ...]], ...]
    max_staleness: int = 0
    pipeline_stage_num: int = 1
    torch_threads: int = 1
    fused: bool = True
    devices_per_node: int = 0  # slot s is on node s // devices_per_node (0: one node)

    def placement(self) -> dict[str, str]:
        """``cluster.component_placement`` as a user writes it (keys joined by commas)."""
        return {",".join(names): _ranges(slots) for names, slots in self.groups}

    def config_keys(self, mode: str) -> dict[str, Any]:
        """The keys a run of this layout is given (``replace_keys``): placement, fusion,
        staleness, torch threads and, embodied, env stages."""
        keys: dict[str, Any] = {
            "cluster.component_placement": self.placement(),
            "cluster.fuse_collocated": self.fused,
            "runner.max_staleness": self.max_staleness,
            "runner.torch_threads": self.torch_threads,
        }
        if mode == "embodied":
            keys["rollout.pipeline_stage_num"] = self.pipeline_stage_num
        return keys

    def slots_of(self, component: str) -> tuple[int, ...]:
        return next(slots for names, slots in self.groups if component in names)

    def processes(self) -> int:
        return sum(len(slots) * (1 if self.fused else len(names)) for names, slots in self.groups)

    def nodes_of(self, component: str) -> set[int]:
        per = self.devices_per_node
        return {s // per if per else 0 for s in self.slots_of(component)}

    def together(self, a: str, b: str) -> bool:
        """Whether ``a`` and ``b`` share their processes (one group, fused)."""
        return a == b or (self.fused and any(a in n and b in n for n, _ in self.groups))


@dataclass(frozen=True)
class Prediction:
    iteration_s: float
    stages: dict[str, float]  # each stage's predicted seconds (synchronous: they add up)
    bottleneck: str  # the stage (or, asynchronously, the side or slot) that sets the time


def _ranges(slots: tuple[int, ...]) -> str:
    first, last = slots[0], slots[-1]
    if list(slots) == list(range(first, last + 1)):
        return str(first) if first == last else f"{first}-{last}"
    return ",".join(str(s) for s in slots)


def scaled(profile: Profile, throughput: float) -> Profile:
    """``profile`` on devices ``throughput`` times as fast: every computed second divided by it
    (what calls between processes cost stays the link's)."""
    work = {
        stage: {c: dataclasses.replace(w, seconds=w.seconds / throughput) for c, w in parts.items()}
        for stage, parts in profile.work.items()
    }
    stages = {s: t / throughput for s, t in profile.stages.items()}
    return dataclasses.replace(profile, work=work, stages=stages)


def predict(candidate: Candidate, profile: Profile) -> Prediction:
    """The predicted seconds of one iteration of ``candidate`` (module docstring)."""
    model = _Model(candidate, profile)
    if candidate.max_staleness == 0:
        stages = {s: model.serial(s) for s in model.stages()}
        total = sum(stages.values())
        cores = model.cpu_bound(model.loads(model.stages()))
        if cores > total:
            return Prediction(cores, stages, "the cores' load")
        return Prediction(total, stages, max(stages, key=stages.get) if stages else "")
    return model.overlapped()


class _Model:
    def __init__(self, candidate: Candidate, profile: Profile) -> None:
        self.c, self.p = candidate, profile
        self.apart = candidate.processes() > 1  # the driver reaches components through Ray

    def stages(self) -> list[str]:
        p = self.p
        skip = p.reuses_log_probs and self.c.together("actor", "rollout")
        return [s for s in p.stages if not (s == LOGPROB and skip)]

    def ranks(self, component: str) -> int:
        return len(self.c.slots_of(component))

    def crosses(self, component: str, work: Work) -> bool:
        """Whether ``work``'s calls go from one process to another."""
        if not self.apart:
            return False
        return work.caller == DRIVER or not self.c.together(work.caller, component)

    def crossing(self, component: str, work: Work, stage: str = "") -> float:
        """What ``component``'s calls cost in transit on each of its ranks (each rank takes as
        many calls, with its share of the bytes): nothing within one process; per call, the
        stage's measured transit where the profile has it, else the link's."""
        if not self.crosses(component, work):
            return 0.0
        if stage in self.p.transit:
            return work.calls * self.p.transit[stage]
        link, latency = self.p.link, None
        theirs = {0} if work.caller == DRIVER else self.c.nodes_of(work.caller)  # the head's
        if work.caller != DRIVER:
            mine, near = self.c.slots_of(component), self.c.slots_of(work.caller)
            latency = link.between_workers(same_slot=not set(mine).isdisjoint(near))
        apart = self.c.nodes_of(component) != theirs or len(theirs) > 1
        return link.seconds(work.calls, work.bytes / self.ranks(component), latency, apart)

    def call_cpu(self, component: str, work: Work) -> tuple[float, float]:
        """The CPU seconds ``work``'s crossing calls cost the component's process and the
        caller's, per rank."""
        if not self.crosses(component, work):
            return 0.0, 0.0
        cpu = self.p.call_cpu
        return work.calls * cpu.get(component, 0.0), work.calls * cpu.get(work.caller, 0.0)

    def measured_parallel(self, stage: str) -> float | None:
        """The stage's measured data-parallel seconds (``Profile.parallel``) where one of its
        components runs on as many ranks as were measured; None where none does."""
        p = self.p
        if stage not in p.parallel or p.parallel_ranks < 2:
            return None
        ranks = [self.ranks(c) for c in p.work.get(stage, {})]
        return p.parallel[stage] if p.parallel_ranks in ranks else None

    def allreduce(self, component: str, stage: str) -> float:
        r = self.ranks(component)
        if r == 1 or stage not in UPDATES or self.measured_parallel(stage) is not None:
            return 0.0
        steps = self.p.grad_steps.get(component, 0.0)
        nbytes = self.p.grad_bytes.get(component, 0.0) * 2 * (r - 1) / r
        nodes = len(self.c.nodes_of(component)) > 1  # a ring through the slowest link
        return self.p.link.seconds(steps, steps * nbytes, nodes=nodes)

    def part(self, stage: str, component: str, work: Work) -> float:
        """One component's seconds in ``stage`` on each of its ranks, its transit included."""
        r = self.ranks(component)
        moved = self.crossing(component, work, stage)
        return work.seconds / r + moved + self.allreduce(component, stage)

    def sync_seconds(self) -> float:
        if self.c.together("actor", "rollout"):
            return self.p.stages.get(SYNC, 0.0)  # in one process: a copy, or nothing shared
        if SYNC in self.p.transit:  # measured between two processes
            return self.p.stages.get(SYNC, 0.0) + self.p.transit[SYNC]
        nodes = self.c.nodes_of("actor") | self.c.nodes_of("rollout")
        return self.p.link.seconds(1, self.p.weight_bytes, nodes=len(nodes) > 1)

    def collect(self, work: Mapping[str, Work]) -> float:
        """Embodied collection: env and rollout alternate, or overlap in pipeline stages."""
        env, rollout = work.get("env"), work.get("rollout")
        if env is None or rollout is None:
            return sum(self.part("collect", c, w) for c, w in work.items())
        s = self.c.pipeline_stage_num
        env = dataclasses.replace(env, calls=env.calls * s)  # a step call per stage and step
        e, r = self.part("collect", "env", env), self.part("collect", "rollout", rollout)
        if s > 1 and set(self.c.slots_of("env")).isdisjoint(self.c.slots_of("rollout")):
            return max(e, r, (e + r) / s)
        return e + r

    def serial(self, stage: str) -> float:
        """A synchronous stage: the driver's own seconds and each part in turn."""
        if stage == SYNC:
            return self.sync_seconds()
        if stage == OTHER:  # the driver's bookkeeping, more of it with results from processes
            extra = self.p.transit.get(OTHER, 0.0) if self.apart else 0.0
            return self.p.stages.get(OTHER, 0.0) + extra
        work = self.p.work.get(stage, {})
        own = self.p.driver_seconds(stage) + (self.measured_parallel(stage) or 0.0)
        if stage == "collect" and self.p.mode == "embodied":
            return own + self.collect(work)
        return own + sum(self.part(stage, c, w) for c, w in work.items())

    def loads(self, stages: list[str]) -> tuple[dict[int, float], float]:
        """The CPU (or device) seconds each slot spends on ``stages``, calls between processes
        included on both sides; and the driver's."""
        per_slot: dict[int, float] = {}
        driver = 0.0
        for stage in stages:
            driver += self.p.driver_seconds(stage)
            for component, work in self.p.work.get(stage, {}).items():
                r = self.ranks(component)
                mine, theirs = self.call_cpu(component, work)
                own = work.seconds / r + self.allreduce(component, stage) + mine
                for slot in self.c.slots_of(component):
                    per_slot[slot] = per_slot.get(slot, 0.0) + own
                if work.caller == DRIVER:
                    driver += theirs * r
                else:
                    for slot in self.c.slots_of(work.caller):
                        per_slot[slot] = per_slot.get(slot, 0.0) + theirs
        return per_slot, driver

    def side_by_side(self, stages: list[str]) -> float:
        """Stages submitted at once: the slowest slot's sum (parts sharing a slot take turns),
        or the slowest part's time in transit where that is longer."""
        per_slot, _ = self.loads(stages)
        slowest = max(
            (
                self.part(stage, c, w)
                for stage in stages
                for c, w in self.p.work.get(stage, {}).items()
            ),
            default=0.0,
        )
        own = sum(
            self.p.driver_seconds(stage) + (self.measured_parallel(stage) or 0.0)
            for stage in stages
        )
        return own + max(max(per_slot.values(), default=0.0), slowest)

    def cpu_bound(self, loads: tuple[dict[int, float], float]) -> float:
        """On CPU slots: every process's and the driver's CPU seconds (``loads``) shared by the
        cores."""
        if not self.p.cores or not self.apart:
            return 0.0
        per_slot, driver = loads
        return (sum(per_slot.values()) + driver) / self.p.cores

    def overlapped(self) -> Prediction:
        """Staleness >= 1: generation beside the training side (module docstring)."""
        gen = GENERATION[self.p.mode]
        stages = [s for s in self.stages() if s != SYNC]
        passes = [s for s in stages if s in PASSES]
        updates = [s for s in stages if s in UPDATES]
        rest = [s for s in stages if s != gen and s not in passes and s not in updates]
        # the weight sync is a collective: the actor sends when its update is done, the rollout
        # takes the weights when its generation is, so both chains wait for it
        sync = self.sync_seconds()
        seconds = {gen: self.serial(gen), SYNC: sync, **{s: self.serial(s) for s in rest}}
        if passes:
            seconds["passes"] = self.side_by_side(passes)
        if updates:
            seconds["updates"] = self.side_by_side(updates)
        training = sum(seconds.values()) - seconds[gen]
        loads = self.loads(stages)
        load = dict(loads[0])
        if not self.c.together("actor", "rollout"):  # both sides of the copy are busy in it
            for slot in set(self.c.slots_of("actor")) | set(self.c.slots_of("rollout")):
                load[slot] = load.get(slot, 0.0) + sync
        busiest = max(load, key=load.get) if load else 0
        sides = {
            f"{gen} (beside training)": seconds[gen] + sync,
            "training": training,
            f"slot {busiest}'s load": load.get(busiest, 0.0),
            "the cores' load": self.cpu_bound(loads),
        }
        bottleneck = max(sides, key=sides.get)
        return Prediction(sides[bottleneck], seconds, bottleneck)
