"""The placement profile (``rlcore placement --profile``): a config's iteration measured in one
process, each component's calls timed apart (``rlcore.scheduler.tracing``: ``calibrate``);
what calls between processes cost its batches (every component apart: ``calibrate_apart``);
what data parallelism adds (every component on every slot: ``calibrate_parallel``); and a Ray
probe (``measure_link``). The advisor (``rlcore.placement.advise``) predicts every candidate
layout from it.

Each calibration runs ``Measure.warmup`` iterations, then at least ``Measure.iterations`` and
``Measure.min_seconds`` measured ones, in a temporary run folder, with nothing checkpointed or
logged, with Ray up as in a run (and settled: ``settle``); the one-process one on CPU at one
thread and at as many as the cluster has slots (the one-process candidate may use them all),
the two taking turns iteration by iteration, on a GPU at ``runner.torch_threads``, the others
at one. A reasoning calibration makes the actor recompute the old log-probs (a layout with the
rollout apart needs that pass) and records whether a one-process run would skip it.

A profile is kept as JSON named by its fingerprint: the config's keys that change what an
iteration computes (placement, staleness, threads, stages, the run's length and outputs left
out) and the machine (CPU count, model and vector instruction sets, GPU, torch). Another config
or machine has another fingerprint, so its profile is measured anew, never reused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import platform
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlcore.columns import SUM_PI_SQUARED
from rlcore.config.errors import ConfigError
from rlcore.config.fields import as_plain
from rlcore.config.load import replace_keys
from rlcore.log import say
from rlcore.placement import build_plan, plan_for_config
from rlcore.placement.cost import OTHER, Link, Profile, Work
from rlcore.placement.resolve import resolve_cluster
from rlcore.scheduler.tracing import Tracer, tracing

PROFILE_VERSION = 2  # 2: the stage "other"
# keys that do not change what one iteration computes on one process: left out of the
# fingerprint (a profile serves every layout, staleness, thread count and run length)
LAYOUT_KEYS = (
    "cluster",
    "runner.max_staleness",
    "runner.torch_threads",
    "runner.total_env_steps",
    "runner.total_iterations",
    "runner.output_dir",
    "runner.run_name",
    "runner.resume",
    "runner.progress",
    "runner.checkpoint_every",
    "runner.keep_checkpoints",
    "runner.eval_every",
    "runner.dry_run",
    "rollout.pipeline_stage_num",
    "logger",
)


# The CPU's vector instruction sets that change which kernels torch runs (and so both the
# seconds and the last bits of every float result): a virtual machine's model name often hides
# them ("Intel(R) Xeon(R) Processor").
SIMD = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile")


def machine() -> dict[str, Any]:
    """What the measured seconds (and a run's float results) depend on besides the config."""
    import torch

    cpu, flags = "", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and not cpu:
                cpu = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        cpu = platform.processor()
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "simd": [f for f in SIMD if f in flags],
        "gpu": gpu,
        "torch": torch.__version__,
    }


def fingerprint(config: Any) -> str:
    """The profile's name: a digest of the config's computing keys and the machine."""
    plain = as_plain(config)
    for path in LAYOUT_KEYS:
        *parents, leaf = path.split(".")
        section = plain
        for part in parents:
            section = section.get(part, {})
        section.pop(leaf, None)
    text = json.dumps({"config": plain, "machine": machine()}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def profile_threads(config: Any) -> tuple[int, ...]:
    """The thread counts a calibration measures (module docstring)."""
    spec = resolve_cluster(config.cluster)
    if spec.device == "cuda":
        return (config.runner.torch_threads,)
    return tuple(sorted({1, spec.devices_per_node}))


def _one_process(config: Any, threads: int, length: int, out: str) -> Any:
    changes: dict[str, Any] = {
        "cluster.component_placement": None,
        "cluster.address": None,
        "runner.max_staleness": 0,
        "runner.torch_threads": threads,
        "runner.checkpoint_every": 0,
        "runner.progress": False,
        "runner.output_dir": out,
        "runner.run_name": "profile",
        "runner.resume": "never",
        "logger.tensorboard": False,
    }
    if config.mode == "embodied":
        changes["rollout.pipeline_stage_num"] = 1
        changes["runner.total_env_steps"] = (
            length * config.runner.rollout_steps * config.env.num_envs
        )
    else:
        changes["runner.total_iterations"] = length
        changes["actor.recompute_log_probs"] = True
    return replace_keys(config, changes)


def grad_steps(config: Any) -> dict[str, float]:
    """Optimiser steps per iteration of each trained component (its gradients' all-reduces on
    several ranks)."""
    actor = config.actor
    if config.mode == "embodied":
        batch = config.runner.rollout_steps * config.env.num_envs
        return {"actor": actor.ppo_epochs * max(batch // actor.ppo_mini_batch_size, 1)}
    batch = config.data.train_batch_size
    steps = {"actor": actor.ppo_epochs * max(batch // actor.ppo_mini_batch_size, 1)}
    critic = config.derived.critic_update
    if config.derived.critic_model and critic is not None:
        steps["critic"] = critic.ppo_epochs * max(batch // critic.ppo_mini_batch_size, 1)
    return steps


def weight_bytes(weights: dict[str, Any]) -> float:
    """The bytes of ``weights``, a tensor held under two names (a shared trunk) counted once."""
    storages = {
        t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in weights.values()
    }
    return float(sum(storages.values()))


# A calibration measures at least its iterations and MIN_SECONDS, at most MOST_ITERATIONS: a
# short iteration (CartPole's 20 ms) is measured over many, so its timer's noise averages out.
MIN_SECONDS = 2.0
MOST_ITERATIONS = 400


@dataclass(frozen=True)
class Measure:
    """How long each calibration runs: ``warmup`` iterations, then at least ``iterations`` and
    ``min_seconds`` measured (``MOST_ITERATIONS`` at most)."""

    iterations: int = 3
    warmup: int = 2  # as benchmarks/placement_advice.py leaves out a run's first two
    min_seconds: float = MIN_SECONDS


@contextmanager
def _layout_runner(
    config: Any, threads: int, changes: dict[str, Any], tracer: Tracer | None = None
) -> Iterator[Any]:
    """A runner of ``config`` in one process at ``threads`` threads with ``changes`` on top (a
    layout), in a temporary run folder (``tracer``: its in-driver components traced); closed
    after."""
    from rlcore.runners.supervisor import build_runner

    with tempfile.TemporaryDirectory(prefix="rlcore-profile-") as out:
        layout = _one_process(config, threads, 2 * (MOST_ITERATIONS + 16), out)  # 2 turns
        if changes:
            layout = replace_keys(layout, {**changes, "cluster.address": config.cluster.address})
        plan = plan_for_config(layout)
        with tracing(tracer) if tracer is not None else contextlib.nullcontext():
            runner = build_runner(layout, plan)
        try:
            yield runner
        finally:
            runner.close()


def _stage_seconds(runner: Any, iteration: int) -> dict[str, float]:
    """One iteration's seconds per stage (``time/<stage>_s``), what it spent outside them as
    ``OTHER``."""
    began = time.perf_counter()
    metrics = runner.iterate(iteration)
    wall = time.perf_counter() - began
    stages: dict[str, float] = defaultdict(float)
    for name, value in metrics.items():
        if name.startswith("time/"):
            stages[name.removeprefix("time/").removesuffix("_s")] += value
            wall -= value
    stages[OTHER] += max(wall, 0.0)
    return stages


def _iterate_turns(
    runner: Any, measure: Measure, turns: list[Any], after_warmup: Any = None
) -> list[tuple[dict[str, float], int]]:
    """The iterations of ``runner`` taken in turn by ``turns`` (each called before its
    iteration: a setting such as a thread count), so that whatever else the machine does falls
    on every turn alike: ``measure.warmup`` iterations each, ``after_warmup()``, then measured
    ones until each turn has at least ``measure.iterations`` and ``measure.min_seconds`` (or
    ``MOST_ITERATIONS``). For each turn, the mean seconds of each stage an iteration and how
    many were measured."""
    i = 0
    for _ in range(measure.warmup):
        for turn in turns:
            i += 1
            turn()
            runner.iterate(i)
    if after_warmup is not None:
        after_warmup()
    totals: list[dict[str, float]] = [defaultdict(float) for _ in turns]
    counts = [0] * len(turns)

    def wanted(k: int) -> bool:
        spent = sum(totals[k].values())
        enough = counts[k] >= measure.iterations and spent >= measure.min_seconds
        return counts[k] < MOST_ITERATIONS and not enough

    while any(wanted(k) for k in range(len(turns))):
        for k, turn in enumerate(turns):
            i += 1
            turn()
            for stage, seconds in _stage_seconds(runner, i).items():
                totals[k][stage] += seconds
            counts[k] += 1
    return [
        ({stage: seconds / n for stage, seconds in total.items()}, n)
        for total, n in zip(totals, counts, strict=True)
    ]


def _iterate(
    runner: Any, measure: Measure, after_warmup: Any = None
) -> tuple[dict[str, float], int]:
    """``_iterate_turns`` with one turn: the mean seconds of each stage an iteration, and how
    many were measured."""
    return _iterate_turns(runner, measure, [lambda: None], after_warmup)[0]


def calibrate(
    config: Any, threads: tuple[int, ...], link: Link, measure: Measure = Measure()
) -> dict[int, Profile]:
    """``config``'s iteration in one process at each of ``threads`` torch threads, the thread
    counts taking turns iteration by iteration in one runner (module docstring): a profile
    for each."""
    from rlcore.scheduler.worker import set_torch_threads

    tracer = Tracer()
    tallies: dict[int, dict] = {t: {} for t in threads}

    def turn(t: int) -> Any:
        def setting() -> None:
            set_torch_threads(t)
            tracer.use(tallies[t])

        return setting

    def reset() -> None:
        for tally in tallies.values():
            tally.clear()

    with _layout_runner(config, threads[0], {}, tracer) as runner:
        measured = _iterate_turns(runner, measure, [turn(t) for t in threads], reset)
        objects = runner.components.objects
        sizes = {
            name: weight_bytes(obj.weights())
            for name, obj in objects.items()
            if name in ("actor", "critic") and hasattr(obj, "weights")
        }
        reuses = False
        if config.mode == "reasoning":
            from rlcore.algorithms import ADVANTAGES

            needs_pi = (
                SUM_PI_SQUARED in ADVANTAGES.entry(config.algorithm.adv_type).traits["inputs"]
            )
            reuses = config.derived.bypass_mode or (
                not config.actor.recompute_log_probs
                and not needs_pi
                and objects["rollout"].generates_with_the_actor()
            )
    profiles = {}
    for t, (stages, iterations) in zip(threads, measured, strict=True):
        profiles[t] = Profile(
            mode=config.mode,
            threads=t,
            stages=dict(stages),
            work=_work(tallies[t], stages, iterations),
            link=link,
            weight_bytes=sizes.get("actor", 0.0),
            grad_steps=grad_steps(config),
            grad_bytes=sizes,
            reuses_log_probs=reuses,
        )
    return profiles


def _work(
    tallies: dict[tuple[str, str, str], Any], stages: dict[str, float], iterations: int
) -> dict[str, dict[str, Work]]:
    """The tracer's ``tallies`` over ``iterations`` as each stage's work per component (calls
    outside the iteration's ``stages`` left out)."""
    totals: dict[tuple[str, str], list] = {}  # (stage, component) -> seconds, calls, bytes, caller
    for (stage, component, caller), tally in tallies.items():
        if stage not in stages:
            continue  # (calls outside the iteration's stages)
        total = totals.setdefault((stage, component), [0.0, 0, 0, caller])
        total[0] += tally.seconds
        total[1] += tally.calls
        total[2] += tally.bytes
        if caller == "driver":  # called by the driver and a component: the driver's calls
            total[3] = caller
    work: dict[str, dict[str, Work]] = defaultdict(dict)
    for (stage, component), (seconds, calls, nbytes, caller) in totals.items():
        n = iterations
        work[stage][component] = Work(seconds / n, calls / n, nbytes / n, caller)
    return {stage: dict(parts) for stage, parts in work.items()}


def median_seconds(call: Any, repeats: int) -> float:
    """The median wall seconds of ``repeats`` calls of ``call()``."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


class _Echo:
    """The link probe's callee: answers at once."""

    def __init__(self, ctx: Any) -> None:
        pass

    def noop(self) -> None:
        return None

    def take(self, payload: Any) -> None:
        return None


class _Caller(_Echo):
    """The link probe's caller: times its calls to a peer worker."""

    def __init__(self, ctx: Any, near: Any, far: Any) -> None:
        self.peers = {"near": near, "far": far}

    def time_calls(self, peer: str, calls: int) -> float:
        """The median seconds of ``calls`` calls of the peer's ``noop``."""
        handle = self.peers[peer]
        handle.noop()
        return median_seconds(handle.noop, calls)


def measure_link(config: Any, payload_mib: int = 32, calls: int = 30) -> Link:
    """A call's round trip on this machine's Ray: from the driver to a worker, and from a
    worker to a worker on another slot and on its own; and the bandwidth of a ``payload_mib``
    MiB tensor sent from the driver (medians)."""
    import torch

    from rlcore.placement.components import ComponentRoles
    from rlcore.scheduler.deployment import ComponentSpec, start_components
    from rlcore.scheduler.handles import Peer

    spec = resolve_cluster(config.cluster)
    other = str(min(1, spec.devices_per_node - 1))
    plan = build_plan(
        {"actor": "0", "rollout": other, "env": other},  # caller beside near, apart from far
        ComponentRoles("embodied", ("actor", "rollout", "env")),
        num_nodes=1,
        devices_per_node=spec.devices_per_node,
        device="cpu",
        fuse=False,
    )
    payload = torch.zeros(payload_mib << 18)  # float32: payload_mib MiB
    components = start_components(plan, config.cluster)
    try:
        far, _ = components.launch_all([ComponentSpec("actor", _Echo), ComponentSpec("env", _Echo)])
        peers = {"near": Peer("env"), "far": Peer("actor")}
        caller = components.launch(ComponentSpec("rollout", _Caller, (), peers))

        far.noop()
        latency = median_seconds(far.noop, calls)
        far.take(payload)
        sending = median_seconds(lambda: far.take(payload), max(calls // 6, 3))
        peer = caller.time_calls("far", calls)
        same = caller.time_calls("near", calls)
    finally:
        components.close()
    nbytes = payload.numel() * payload.element_size()
    return Link(
        latency_s=latency,
        bytes_per_s=nbytes / max(sending - latency, 1e-9),
        peer_latency_s=peer,
        same_slot_latency_s=same,
    )


def to_json(profiles: dict[int, Profile], config: Any) -> dict[str, Any]:
    return {
        "version": PROFILE_VERSION,
        "fingerprint": fingerprint(config),
        "machine": machine(),
        "mode": config.mode,
        "profiles": {str(t): dataclasses.asdict(p) for t, p in profiles.items()},
    }


def _number(where: str, value: Any, positive: bool = False) -> None:
    """``value`` a finite number at least 0 (above 0 with ``positive``); ``ValueError`` naming
    ``where`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where}: {value!r} is not a finite number")
    if value < 0 or (positive and value == 0):
        raise ValueError(f"{where}: {value!r} must be {'above' if positive else 'at least'} 0")


def _checked(p: Profile, where: str) -> Profile:
    """``p`` read from JSON with every figure a finite number in range (``ValueError`` naming
    the field otherwise): what the cost model computes with."""
    if p.mode not in ("embodied", "reasoning"):
        raise ValueError(f"{where}.mode: {p.mode!r} is not embodied or reasoning")
    for stage, seconds in p.stages.items():
        _number(f"{where}.stages.{stage}", seconds)
    for stage, parts in p.work.items():
        for component, w in parts.items():
            for name in ("seconds", "calls", "bytes"):
                _number(f"{where}.work.{stage}.{component}.{name}", getattr(w, name))
    link = p.link
    _number(f"{where}.link.latency_s", link.latency_s)
    _number(f"{where}.link.bytes_per_s", link.bytes_per_s, positive=True)
    for name in ("peer_latency_s", "same_slot_latency_s", "inter_node_bytes_per_s"):
        if getattr(link, name) is not None:
            _number(f"{where}.link.{name}", getattr(link, name), positive=name.endswith("per_s"))
    _number(f"{where}.weight_bytes", p.weight_bytes)
    for field in ("grad_steps", "grad_bytes", "transit", "call_cpu", "parallel"):
        for key, value in getattr(p, field).items():
            _number(f"{where}.{field}.{key}", value)
    for field in ("threads", "cores", "parallel_ranks"):
        value = getattr(p, field)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{where}.{field}: {value!r} is not a whole number at least 0")
    return p


def from_json(data: dict[str, Any]) -> dict[int, Profile]:
    """The profiles of a kept (or given) profile's JSON, each figure checked (``ValueError`` or
    ``KeyError`` / ``TypeError`` naming what is wrong)."""
    profiles = {}
    for threads, p in data["profiles"].items():
        work = {
            stage: {c: Work(**w) for c, w in parts.items()} for stage, parts in p["work"].items()
        }
        profile = Profile(**{**p, "work": work, "link": Link(**p["link"])})
        profiles[int(threads)] = _checked(profile, f"profiles.{threads}")
    return profiles


def read_profile_file(path: Path, config: Any) -> dict[int, Profile]:
    """A profile given by the user (``--profile-file``): kept profiles' JSON, of the config's
    mode; ``ConfigError`` naming the file otherwise. Its fingerprint is not checked: a profile
    on paper stands for a machine that is not this one."""
    try:
        data = json.loads(Path(path).read_text())
        profiles = from_json(data)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise ConfigError(
            f"--profile-file: {path} is not a placement profile ({type(error).__name__}: "
            f"{error}); write one as `rlcore placement CONFIG --profile` keeps it"
        ) from None
    if data.get("mode") != config.mode:
        raise ConfigError(
            f"--profile-file: {path} profiles a config of mode {data.get('mode')}, this one "
            f"is of mode {config.mode}"
        )
    return profiles


def profile_path(config: Any) -> Path:
    """Where ``config``'s profile is kept: ``runner.output_dir/placement/<fingerprint>.json``."""
    return Path(config.runner.output_dir) / "placement" / f"{fingerprint(config)}.json"


def load_profile(path: Path, config: Any) -> dict[int, Profile] | None:
    """The profiles kept at ``path`` if they were measured for ``config`` on this machine;
    None (said in one line) if not."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        say(f"placement: the profile {path} is not a profile's JSON object; measuring anew")
        return None
    wanted = fingerprint(config)
    if data.get("version") != PROFILE_VERSION or data.get("fingerprint") != wanted:
        say(
            f"placement: the profile {path} was measured for another config or machine "
            f"(fingerprint {data.get('fingerprint')}, this run's {wanted}); measuring anew"
        )
        return None
    try:
        return from_json(data)
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        say(f"placement: the profile {path} does not read ({error}); measuring anew")
        return None


def apart_layout(config: Any) -> dict[str, str]:
    """Every component the config runs in a process of its own, the processes dealt over the
    slots in turn (the transit calibration's layout; ``cluster.fuse_collocated: false``)."""
    from rlcore.placement import component_roles

    spec = resolve_cluster(config.cluster)
    slots = spec.num_nodes * spec.devices_per_node
    return {c: str(i % slots) for i, c in enumerate(component_roles(config).required)}


def calibrate_apart(
    config: Any, one: Profile, measure: Measure = Measure()
) -> tuple[dict[str, float], dict[str, float]]:
    """What calls between processes cost this config's own batches, measured with every
    component in a process of its own (``apart_layout``), synchronously, at one thread:
    per stage, the wall seconds each call adds to it (``Profile.transit``: the stage's time
    there less in one process, over its calls); per process, the CPU seconds each call it takes
    part in costs it (``Profile.call_cpu``: its CPU time less its work in one process, over its
    calls; the driver's likewise). ``one``: the same config's one-process profile."""
    apart = {"cluster.component_placement": apart_layout(config), "cluster.fuse_collocated": False}
    with _layout_runner(config, 1, apart) as runner:
        before: dict[str, Any] = {}

        def snapshot() -> None:
            before["cpu"], before["driver"] = runner.components.cpu_seconds(), time.process_time()

        stages, iterations = _iterate(runner, measure, snapshot)
        cpu, driver = before["cpu"], (time.process_time() - before["driver"]) / iterations
        after = runner.components.cpu_seconds()
        used = {c: (after[(c, r)] - cpu[(c, r)]) / iterations for c, r in cpu}
    transit = {}
    for stage, seconds in stages.items():
        calls = sum(w.calls for w in one.work.get(stage, {}).values())
        extra = max(seconds - one.stages.get(stage, 0.0), 0.0)
        if stage in ("sync", OTHER):
            transit[stage] = extra  # one weight copy an iteration; the driver's bookkeeping
        elif calls:
            transit[stage] = extra / calls
    taken: dict[str, float] = defaultdict(float)  # calls each process takes part in
    computed: dict[str, float] = defaultdict(float)
    for parts in one.work.values():
        for component, work in parts.items():
            taken[component] += work.calls
            taken[work.caller] += work.calls
            computed[component] += work.seconds
    own = sum(one.driver_seconds(s) for s in one.stages)
    used["driver"] = driver
    computed["driver"] = own
    call_cpu = {
        who: max(used[who] - computed[who], 0.0) / taken[who] for who in used if taken.get(who)
    }
    return transit, call_cpu


def calibrate_parallel(
    config: Any, measured: Profile, measure: Measure = Measure()
) -> tuple[dict[str, float], int]:
    """What data parallelism costs beyond the split work, measured with every component on
    every slot of the first node (one process a slot), synchronously, at one thread: per
    stage, its seconds there less what ``measured`` (the one-process profile with what calls
    between processes cost) predicts for that layout without all-reduces (``Profile.parallel``),
    and the ranks. Nothing where the node has one slot or the config's batches do not split."""
    from rlcore.placement import component_roles
    from rlcore.placement.cost import Candidate, predict

    ranks = resolve_cluster(config.cluster).devices_per_node
    names = component_roles(config).required
    if ranks < 2:
        return {}, 0
    parallel = {"cluster.component_placement": {",".join(names): f"0-{ranks - 1}"}}
    try:
        with _layout_runner(config, 1, parallel) as runner:
            stages, _ = _iterate(runner, measure)
    except ConfigError as error:  # (the batches do not split over the slots, say)
        say(f"placement: data parallel on {ranks} slots not measured ({error}); the link's")
        return {}, 0
    bare = dataclasses.replace(measured, grad_steps={})  # the model without all-reduces
    split = predict(Candidate(((tuple(names), tuple(range(ranks))),)), bare).stages
    return {s: max(t - split.get(s, 0.0), 0.0) for s, t in stages.items() if s in split}, ranks


# After Ray starts, its servers and prestarted workers take the CPU for some seconds; a
# calibration waits (at most SETTLE_S) until the machine's CPUs are under QUIET busy over
# half a second, so that it measures what a run pays once Ray is up, not its start.
SETTLE_S = 30.0
QUIET = 0.25


def settle(most_s: float = SETTLE_S, quiet: float = QUIET) -> float:
    """Wait until the machine's CPUs are less than ``quiet`` busy over half a second (at most
    ``most_s``, said if so); the seconds waited."""
    import psutil

    start = time.perf_counter()
    psutil.cpu_percent(None)
    while time.perf_counter() - start < most_s:
        time.sleep(0.5)
        if psutil.cpu_percent(None) < 100 * quiet:
            return time.perf_counter() - start
    say(
        f"placement: the machine's CPUs stayed over {quiet:.0%} busy for {most_s:.0f} s; "
        "measuring anyway (its figures carry the other work's share)"
    )
    return time.perf_counter() - start


def profile(config: Any, iterations: int = 3) -> tuple[dict[int, Profile], Path]:
    """Calibrate ``config`` at each of its thread counts, and what calls between processes and
    data parallelism cost it; keep the result in the output folder (``profile_path``); the
    profiles by thread count and the file."""
    from rlcore.runners.supervisor import _ray_session

    measure = Measure(iterations)
    spec = resolve_cluster(config.cluster)
    layout = apart_layout(config)
    apart = {"cluster.component_placement": layout, "cluster.fuse_collocated": False}
    # every calibration with Ray up, as a run has it (even in one process): its servers' CPU is
    # part of what a run's iteration costs on a few cores
    with _ray_session(
        plan_for_config(replace_keys(config, {**apart, "runner.max_staleness": 0})),
        config.cluster.address,
    ):
        settle()
        start = time.perf_counter()
        profiles = calibrate(config, profile_threads(config), Link(1.0, 1.0), measure)
        say(
            "placement: in one process, "
            + ", ".join(
                f"at {t} thread(s) {sum(p.stages.values()):.3f} s an iteration"
                for t, p in profiles.items()
            )
            + f" (taking turns; {time.perf_counter() - start:.1f} s in all)"
        )
        say(f"placement: measuring calls between processes, {layout} (each its own process)")
        link = measure_link(config)
        transit, call_cpu = calibrate_apart(config, profiles[min(profiles)], measure)
        cores = spec.devices_per_node if spec.device == "cpu" else 0
        found = {"link": link, "transit": transit, "call_cpu": call_cpu, "cores": cores}
        measured = dataclasses.replace(profiles[min(profiles)], **found)
        say(f"placement: measuring every component data parallel on {spec.devices_per_node} slots")
        found["parallel"], found["parallel_ranks"] = calibrate_parallel(config, measured, measure)
    say(
        f"placement: a call's round trip {link.latency_s * 1e3:.2f} ms from the driver, "
        f"{link.peer_latency_s * 1e3:.2f} ms between workers ("
        f"{link.same_slot_latency_s * 1e3:.2f} ms on one slot), "
        f"{link.bytes_per_s / 2**30:.2f} GiB/s; with this config's batches, per call: "
        + ", ".join(f"{s} {v * 1e3:.2f} ms" for s, v in transit.items())
        + (
            f"; data parallel on {found['parallel_ranks']} slots adds "
            + ", ".join(f"{s} {v * 1e3:.1f} ms" for s, v in found["parallel"].items())
            if found["parallel_ranks"]
            else ""
        )
    )
    profiles = {t: dataclasses.replace(p, **found) for t, p in profiles.items()}
    path = profile_path(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_json(profiles, config), indent=1))
    return profiles, path


def advise(config: Any, remeasure: bool = False, iterations: int = 3) -> list[Any]:
    """``config``'s candidate layouts ranked by predicted seconds per iteration, from its kept
    profile (measured first where there is none for this config and machine, or ``remeasure``)."""
    from rlcore.placement.advise import rank, valid_candidates

    path = profile_path(config)
    profiles = None if remeasure or not path.exists() else load_profile(path, config)
    if profiles is None:
        profiles, path = profile(config, iterations)
    else:
        say(f"placement: the profile measured before, {path}")
    return rank(valid_candidates(config, tuple(profiles)), profiles)


def choose_placement(config: Any) -> tuple[Any, Any]:
    """``cluster.component_placement: auto`` made concrete: the config with the advisor's best
    candidate at its own ``runner.max_staleness`` (staleness changes what a run trains on, so it
    stays the user's), and that candidate (``Ranked``). Said in one line each."""
    from rlcore.placement.advise import placement_text, simplest_first

    ranked = advise(replace_keys(config, {"cluster.component_placement": None}))
    stale = config.runner.max_staleness
    fitting = simplest_first([r for r in ranked if r.candidate.max_staleness == stale])
    if not fitting:
        raise ConfigError(
            f"cluster.component_placement: auto found no layout for runner.max_staleness={stale} "
            "on this cluster (an asynchronous run needs the rollout apart from the actor: at "
            "least 2 slots); set runner.max_staleness=0 or give more slots"
        )
    best = fitting[0]
    c = best.candidate
    fused = "" if c.fused else ", a process per component"
    say(
        f"placement: auto picked {placement_text(c)}{fused}, {c.torch_threads} torch thread(s)"
        + (f", {c.pipeline_stage_num} env stages" if c.pipeline_stage_num > 1 else "")
        + f": predicted {best.prediction.iteration_s:.3f} s an iteration "
        f"({best.speedup:.2f}x one process; bottleneck: {best.prediction.bottleneck})"
    )
    return replace_keys(config, c.config_keys(config.mode)), best
