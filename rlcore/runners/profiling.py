"""The placement profile (``rlcore placement --profile``): a config's iteration measured in one
process, each component's calls timed apart (``rlcore.scheduler.tracing``), and the cost of a
call between two processes measured on this machine's Ray (``measure_link``). The advisor
(``rlcore.placement.advise``) predicts every candidate layout from it.

Calibration runs ``warmup`` iterations, then ``iterations`` measured ones, in a temporary run
folder, with nothing checkpointed or logged; on CPU at one thread and at as many as the cluster
has slots (the one-process candidate may use them all), on a GPU at ``runner.torch_threads``.
A reasoning calibration makes the actor recompute the old log-probs (a layout with the rollout
apart needs that pass) and records whether a one-process run would skip it.

A profile is kept as JSON named by its fingerprint: the config's keys that change what an
iteration computes (placement, staleness, threads, stages, the run's length and outputs left
out) and the machine (CPU count and model, GPU, torch). Another config or machine has another
fingerprint, so its profile is measured anew, never reused.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from rlcore.columns import SUM_PI_SQUARED
from rlcore.config.fields import as_plain
from rlcore.config.load import replace_keys
from rlcore.log import say
from rlcore.placement import build_plan, plan_for_config
from rlcore.placement.cost import Link, Profile, Work
from rlcore.placement.resolve import resolve_cluster
from rlcore.scheduler.tracing import Tracer, tracing

PROFILE_VERSION = 1
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


def machine() -> dict[str, Any]:
    """What the measured seconds depend on besides the config."""
    import torch

    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        cpu = platform.processor()
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"cpus": os.cpu_count(), "cpu": cpu, "gpu": gpu, "torch": torch.__version__}


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


def calibrate(
    config: Any, threads: int, link: Link, iterations: int = 3, warmup: int = 1
) -> Profile:
    """``config``'s iteration in one process at ``threads`` torch threads (module docstring)."""
    from rlcore.runners.supervisor import build_runner

    with tempfile.TemporaryDirectory(prefix="rlcore-profile-") as out:
        one = _one_process(config, threads, warmup + iterations, out)
        plan = plan_for_config(one)
        tracer = Tracer()
        with tracing(tracer):
            runner = build_runner(one, plan)
        try:
            for i in range(1, warmup + 1):
                runner.iterate(i)
            tracer.reset()
            stages: dict[str, float] = defaultdict(float)
            for i in range(warmup + 1, warmup + iterations + 1):
                for name, value in runner.iterate(i).items():
                    if name.startswith("time/"):
                        stages[name.removeprefix("time/").removesuffix("_s")] += value
            objects = runner.components.objects
            sizes = {
                name: weight_bytes(obj.weights())
                for name, obj in objects.items()
                if name in ("actor", "critic") and hasattr(obj, "weights")
            }
            reuses = False
            if config.mode == "reasoning":
                inputs = config.algorithm.adv_type
                from rlcore.algorithms import ADVANTAGES

                needs_pi = SUM_PI_SQUARED in ADVANTAGES.entry(inputs).traits["inputs"]
                reuses = config.derived.bypass_mode or (
                    not config.actor.recompute_log_probs
                    and not needs_pi
                    and objects["rollout"].generates_with_the_actor()
                )
        finally:
            runner.close()
    totals: dict[tuple[str, str], list] = {}  # (stage, component) -> seconds, calls, bytes, caller
    for (stage, component, caller), tally in tracer.tallies.items():
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
    return Profile(
        mode=config.mode,
        threads=threads,
        stages={name: seconds / iterations for name, seconds in stages.items()},
        work={stage: dict(parts) for stage, parts in work.items()},
        link=link,
        weight_bytes=sizes.get("actor", 0.0),
        grad_steps=grad_steps(config),
        grad_bytes=sizes,
        reuses_log_probs=reuses,
    )


class _Echo:
    """The link probe's component: answers at once."""

    def __init__(self, ctx: Any) -> None:
        pass

    def noop(self) -> None:
        return None

    def take(self, payload: Any) -> None:
        return None


def measure_link(config: Any, payload_mib: int = 32, calls: int = 30) -> Link:
    """A call's round trip between the driver and a worker process on this machine's Ray, and
    the bandwidth of a ``payload_mib`` MiB tensor sent with it (medians)."""
    import torch

    from rlcore.placement.components import ComponentRoles
    from rlcore.scheduler.scheduler import Scheduler

    spec = resolve_cluster(config.cluster)
    roles = ComponentRoles("embodied", ("actor", "rollout"))
    plan = build_plan(
        {"actor": "0", "rollout": str(min(1, spec.devices_per_node - 1))},
        roles,
        num_nodes=1,
        devices_per_node=spec.devices_per_node,
        device="cpu",
    )
    payload = torch.zeros(payload_mib << 18)  # float32: payload_mib MiB
    with Scheduler(plan, address=config.cluster.address, init_distributed=False) as scheduler:
        echo = scheduler.launch("actor", _Echo)
        echo.call_rank(0, "noop")
        echo.call_rank(0, "take", payload)

        def median_s(method: str, *args: Any, n: int) -> float:
            samples = []
            for _ in range(n):
                start = time.perf_counter()
                echo.call_rank(0, method, *args)
                samples.append(time.perf_counter() - start)
            return statistics.median(samples)

        latency = median_s("noop", n=calls)
        sending = median_s("take", payload, n=max(calls // 6, 3))
    nbytes = payload.numel() * payload.element_size()
    return Link(latency_s=latency, bytes_per_s=nbytes / max(sending - latency, 1e-9))


def to_json(profiles: dict[int, Profile], config: Any) -> dict[str, Any]:
    return {
        "version": PROFILE_VERSION,
        "fingerprint": fingerprint(config),
        "machine": machine(),
        "mode": config.mode,
        "profiles": {str(t): dataclasses.asdict(p) for t, p in profiles.items()},
    }


def from_json(data: dict[str, Any]) -> dict[int, Profile]:
    profiles = {}
    for threads, p in data["profiles"].items():
        work = {
            stage: {c: Work(**w) for c, w in parts.items()} for stage, parts in p["work"].items()
        }
        profiles[int(threads)] = Profile(**{**p, "work": work, "link": Link(**p["link"])})
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
    wanted = fingerprint(config)
    if data.get("version") != PROFILE_VERSION or data.get("fingerprint") != wanted:
        say(
            f"placement: the profile {path} was measured for another config or machine "
            f"(fingerprint {data.get('fingerprint')}, this run's {wanted}); measuring anew"
        )
        return None
    return from_json(data)


def profile(config: Any, iterations: int = 3, warmup: int = 1) -> tuple[dict[int, Profile], Path]:
    """Calibrate ``config`` at each of its thread counts, keep the result in the output folder
    (``profile_path``); the profiles by thread count and the file."""
    say("placement: measuring a call between two processes on this machine's Ray")
    link = measure_link(config)
    say(
        f"placement: a call's round trip {link.latency_s * 1e3:.2f} ms, "
        f"{link.bytes_per_s / 2**30:.2f} GiB/s"
    )
    profiles = {}
    for threads in profile_threads(config):
        start = time.perf_counter()
        profiles[threads] = calibrate(config, threads, link, iterations, warmup)
        say(
            f"placement: {warmup} + {iterations} iterations in one process at {threads} "
            f"thread(s): {sum(profiles[threads].stages.values()):.3f} s an iteration "
            f"({time.perf_counter() - start:.1f} s in all)"
        )
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
