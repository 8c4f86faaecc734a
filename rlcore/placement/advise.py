"""The placement advisor: every candidate layout for a cluster, each checked as a run would check
it and ranked by the cost model's predicted seconds per iteration (``cost.py``).

Candidates (docs/placement.md, "Choosing a placement"): every component in one process (at each
profiled thread count on CPU), all of them collocated on every slot (data parallel), and every
disaggregation: the components split into groups, the slots into as many contiguous runs, one
process per slot and group (and, where a group has several components, one process per slot
and component: ``cluster.fuse_collocated: false``); each with staleness 0 and, where the
rollout is apart from the actor, 1; in embodied mode with 1 and, where the env is apart from
the rollout, 2 env stages.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations, pairwise
from typing import Any

from rlcore.config.errors import ConfigError
from rlcore.config.load import replace_keys
from rlcore.config.schema import EmbodiedConfig, RLCoreConfig
from rlcore.placement.checks import check_plan
from rlcore.placement.components import component_roles
from rlcore.placement.cost import Candidate, Prediction, Profile, predict
from rlcore.placement.grammar import PlacementError
from rlcore.placement.plan import build_plan
from rlcore.placement.resolve import resolve_cluster


@dataclass(frozen=True)
class Ranked:
    candidate: Candidate
    prediction: Prediction
    speedup: float  # over the fastest one-process candidate's prediction


def set_partitions(items: Sequence[str]) -> Iterator[list[tuple[str, ...]]]:
    """Every way to split ``items`` into non-empty groups (order within and of groups kept)."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for partition in set_partitions(rest):
        yield [(first,), *partition]
        for i in range(len(partition)):
            yield [*partition[:i], (first, *partition[i]), *partition[i + 1 :]]


def compositions(total: int, parts: int) -> Iterator[tuple[int, ...]]:
    """Every way to write ``total`` as ``parts`` positive whole numbers, in order."""
    for cuts in combinations(range(1, total), parts - 1):
        bounds = (0, *cuts, total)
        yield tuple(b - a for a, b in pairwise(bounds))


def layouts(
    components: Sequence[str], devices: int, embodied: bool, threads: Sequence[int]
) -> Iterator[Candidate]:
    """Every candidate layout of ``components`` on ``devices`` slots (module docstring), before
    any check. ``threads``: torch threads of a one-process candidate (CPU); several processes
    get the smallest."""
    names = tuple(components)
    for t in threads:
        yield Candidate(((names, (0,)),), torch_threads=t)
    one = min(threads)
    if devices > 1:
        yield Candidate(((names, tuple(range(devices))),), torch_threads=one)
    for partition in set_partitions(names):
        if len(partition) < 2 or len(partition) > devices:
            continue
        for counts in compositions(devices, len(partition)):
            starts = [sum(counts[:i]) for i in range(len(counts))]
            groups = tuple(
                (group, tuple(range(s, s + n)))
                for group, s, n in zip(partition, starts, counts, strict=True)
            )
            shared = any(len(group) > 1 for group in partition)
            for fused in (True, False) if shared else (True,):
                base = Candidate(groups, torch_threads=one, fused=fused)
                stalenesses = (0,) if base.together("actor", "rollout") else (0, 1)
                stages = (1,) if not embodied or base.together("env", "rollout") else (1, 2)
                for k in stalenesses:
                    for s in stages:
                        yield Candidate(groups, k, s, one, fused)


def _variant(config: RLCoreConfig, candidate: Candidate, cache: dict) -> RLCoreConfig:
    """The config with the candidate's staleness, stages and threads (built once each)."""
    key = (candidate.max_staleness, candidate.pipeline_stage_num, candidate.torch_threads)
    if key not in cache:
        changes: dict[str, Any] = {
            "runner.max_staleness": candidate.max_staleness,
            "runner.torch_threads": candidate.torch_threads,
            "cluster.component_placement": None,
        }
        if isinstance(config, EmbodiedConfig):
            changes["rollout.pipeline_stage_num"] = candidate.pipeline_stage_num
        try:
            cache[key] = replace_keys(config, changes)
        except ConfigError:  # (a combination the config's own checks refuse)
            cache[key] = None
    return cache[key]


def valid_candidates(config: RLCoreConfig, threads: Sequence[int]) -> list[Candidate]:
    """The candidates for ``config``'s cluster that the run's own checks accept (each passes
    ``build_plan`` and ``check_plan`` with its staleness and stages)."""
    spec = resolve_cluster(config.cluster)
    roles = component_roles(config)
    devices = spec.num_nodes * spec.devices_per_node
    embodied = isinstance(config, EmbodiedConfig)
    cache: dict = {}
    kept = []
    per_node = spec.devices_per_node if spec.num_nodes > 1 else 0
    for candidate in layouts(roles.required, devices, embodied, threads):
        candidate = dataclasses.replace(candidate, devices_per_node=per_node)
        variant = _variant(config, candidate, cache)
        if variant is None:
            continue
        try:
            plan = build_plan(
                candidate.placement(),
                roles,
                num_nodes=spec.num_nodes,
                devices_per_node=spec.devices_per_node,
                device=spec.device,
                fuse=candidate.fused,
            )
            check_plan(variant, plan)
        except PlacementError:
            continue
        kept.append(candidate)
    return kept


# A layout with more processes is picked over one with fewer only where it is predicted more
# than CLOSE faster: closer than that, the model does not tell them apart (in docs/placement.md's
# checks two candidates' errors differed by up to 18%, and 20% is the accuracy the predictions
# are held to), and every process costs start-up, memory and a way to fail.
CLOSE = 0.2


def simplest_first(ranked: Sequence[Ranked], close: float = CLOSE) -> list[Ranked]:
    """``ranked`` with the pick first: of the candidates predicted within ``close`` of the
    fastest, the one with the fewest processes (the fastest of those; of equals, the first); the
    rest in their order. Any order in, so a ranking already picked from can be filtered and
    picked from again (``component_placement: auto`` at the run's staleness)."""
    if not ranked:
        return []
    bound = min(r.prediction.iteration_s for r in ranked) * (1 + close)
    near = [r for r in ranked if r.prediction.iteration_s <= bound]
    pick = min(near, key=lambda r: (r.candidate.processes(), r.prediction.iteration_s))
    return [pick, *(r for r in ranked if r is not pick)]


def rank(candidates: Sequence[Candidate], profiles: Mapping[int, Profile]) -> list[Ranked]:
    """``candidates`` predicted with the profile of their thread count, fastest first, but the
    pick first (``simplest_first``); of the variants of one placement (fusion, env stages) that
    predict the same seconds, the simplest only."""
    predicted = [
        (c, predict(c, profiles[c.torch_threads]))
        for c in candidates
        if c.torch_threads in profiles
    ]
    alone = [p.iteration_s for c, p in predicted if c.processes() == 1]
    base = min(alone) if alone else float("nan")
    # the simplest of a placement's variants that predict the same: fused before a process per
    # component, fewer env stages before more (their extra processes and calls buy nothing)
    predicted.sort(key=lambda cp: (cp[1].iteration_s, not cp[0].fused, cp[0].pipeline_stage_num))
    kept, seen = [], set()
    for c, p in predicted:
        twin = (json.dumps(c.placement()), c.max_staleness, c.torch_threads, p.iteration_s)
        if twin not in seen:
            seen.add(twin)
            kept.append(Ranked(c, p, base / p.iteration_s))
    return simplest_first(kept)


def placement_text(candidate: Candidate) -> str:
    """The placement as a command line writes it (components joined by ``+``)."""
    inner = ",".join(f"{k.replace(',', '+')}:{v}" for k, v in candidate.placement().items())
    return "{" + inner + "}"


def table(ranked: Sequence[Ranked], most: int = 10) -> str:
    """The ranked candidates as ``rlcore placement --advise`` prints them."""
    lines = [
        f"{'#':>2}  {'placement':<44} {'fused':>5} {'stale':>5} {'stages':>6} {'threads':>7} "
        f"{'pred. s/it':>10} {'speed-up':>8}  bottleneck"
    ]
    for i, r in enumerate(ranked[:most]):
        c = r.candidate
        lines.append(
            f"{i:>2}  {placement_text(c):<44} {'yes' if c.fused else 'no':>5} "
            f"{c.max_staleness:>5} {c.pipeline_stage_num:>6} "
            f"{c.torch_threads:>7} {r.prediction.iteration_s:>10.3f} {r.speedup:>7.2f}x  "
            f"{r.prediction.bottleneck}"
        )
    if len(ranked) > most:
        lines.append(f"    ({len(ranked) - most} more candidates)")
    return "\n".join(lines)


def json_line(ranked: Sequence[Ranked]) -> str:
    """The advisor's last line: every candidate, fastest first, and the pick (``best``)."""
    candidates = []
    for r in ranked:
        c = r.candidate
        entry: dict[str, Any] = {
            "placement": c.placement(),
            "max_staleness": c.max_staleness,
            "pipeline_stage_num": c.pipeline_stage_num,
            "torch_threads": c.torch_threads,
            "fuse_collocated": c.fused,
            "predicted_iteration_s": round(r.prediction.iteration_s, 6),
        }
        candidates.append(entry)
    return json.dumps({"candidates": candidates, "best": 0 if candidates else None})
