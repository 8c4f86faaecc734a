"""``PlacementPlan``: for every component, each rank's node, devices and share; no Ray involved."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from rlcore.did_you_mean import did_you_mean
from rlcore.placement.components import ComponentRoles
from rlcore.placement.grammar import (
    KEY_PREFIX,
    PlacementError,
    ProcessSlot,
    parse_value,
    split_key,
)

RESOURCE_STEP = 1e-4  # Ray's resource granularity: fractions are rounded down to it


@dataclass(frozen=True)
class RankPlacement:
    """Where one rank of a component runs."""

    rank: int
    node: int
    devices: tuple[int, ...]  # node-local device ids
    global_devices: tuple[int, ...]
    share: float  # fraction of each of its devices the component's process uses


@dataclass(frozen=True)
class Process:
    """One OS process (a Ray actor): the components it hosts at one rank, and its resources."""

    components: tuple[str, ...]
    rank: int
    node: int
    devices: tuple[int, ...]  # node-local
    fraction: float  # of its first device's slot to request from Ray


@dataclass(frozen=True)
class PlacementPlan:
    layout: str  # collocated | disaggregated | hybrid
    num_nodes: int
    devices_per_node: int
    device: str  # cuda | cpu
    components: dict[str, tuple[RankPlacement, ...]]
    fused: tuple[tuple[str, ...], ...]  # components sharing one process per rank
    skipped: dict[str, str]  # placed but not used by this config -> why
    group_names: Mapping[str, str] = field(default_factory=dict)  # RLinf's group_name, if set
    defaulted: bool = False  # no component_placement given: every component in one process
    # component_placement: auto: the advisor's predicted seconds of an iteration (advise.py)
    predicted_iteration_s: float | None = None

    def group_name(self, component: str) -> str:
        """The name of ``component``'s worker group: its ``group_name``, else its own name."""
        return self.group_names.get(component, component)

    def device_set(self, component: str) -> frozenset[int]:
        return frozenset(d for r in self.components[component] for d in r.global_devices)

    def world_size(self, component: str) -> int:
        return len(self.components[component])

    def processes(self) -> list[Process]:
        """One entry per process to start, fused components together, with Ray fractions."""
        load: dict[int, float] = {}
        for group in self.fused:
            for r in self.components[group[0]]:
                for d in r.global_devices:
                    load[d] = load.get(d, 0.0) + r.share
        result = []
        for group in self.fused:
            for r in self.components[group[0]]:
                first = r.global_devices[0]
                fraction = r.share / max(load[first], 1.0)
                fraction = math.floor(fraction / RESOURCE_STEP) * RESOURCE_STEP
                result.append(Process(group, r.rank, r.node, r.devices, fraction))
        return result

    def to_json(self) -> dict:
        """The ``rlcore placement --json`` object."""
        return {
            "mode": self.layout,
            "num_nodes": self.num_nodes,
            "devices_per_node": self.devices_per_node,
            "components": {
                name: [{"rank": r.rank, "node": r.node, "devices": list(r.devices)} for r in ranks]
                for name, ranks in self.components.items()
            },
        }

    def table(self) -> str:
        """A readable table of the plan, as ``rlcore placement`` and dry runs print it."""
        slot = "GPU" if self.device == "cuda" else "CPU slot"
        lines = [
            f"placement: {self.layout}, {self.num_nodes} node(s) x {self.devices_per_node} "
            f"{slot}(s)",
            f"{'component':<10} {'rank':>4} {'node':>4}  {'devices':<12} share",
        ]
        for name, ranks in self.components.items():
            for r in ranks:
                devices = ",".join(str(d) for d in r.devices)
                lines.append(f"{name:<10} {r.rank:>4} {r.node:>4}  {devices:<12} {r.share:g}")
        for group in self.fused:
            if len(group) > 1:
                lines.append(f"one process per rank for: {', '.join(group)}")
        if self.group_names:
            named = ", ".join(f"{c}={g}" for c, g in self.group_names.items())
            lines.append(f"worker groups: {named}")
        for name, why in self.skipped.items():
            lines.append(f"not started: {name} ({why})")
        if self.defaulted:
            lines.append(
                "no cluster.component_placement: every component in one process on slot 0; "
                "place them to use more slots (docs/placement.md)"
            )
        return "\n".join(lines)


def runs_in_driver(plan: PlacementPlan, address: str | None) -> bool:
    """One process and no cluster to join: every component runs in the driver, no Ray at all."""
    return len(plan.processes()) == 1 and address is None


def _layout(sets: dict[str, frozenset[int]]) -> str:
    """collocated: one device set for all; disaggregated: the distinct sets are pairwise
    disjoint (components placed identically count as one, so ``env: 0, actor,rollout: 1`` is
    disaggregated); hybrid: some sets overlap without being equal."""
    distinct = list(set(sets.values()))
    if len(distinct) == 1:
        return "collocated"
    if all(a.isdisjoint(b) for i, a in enumerate(distinct) for b in distinct[i + 1 :]):
        return "disaggregated"
    return "hybrid"


def _ranges(devices: frozenset[int]) -> str:
    out, ordered = [], sorted(devices)
    start = prev = ordered[0]
    for d in [*ordered[1:], None]:
        if d is not None and d == prev + 1:
            prev = d
            continue
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
        if d is not None:
            start = prev = d
    return ",".join(out)


def _check_reasoning_overlaps(sets: dict[str, frozenset[int]]) -> None:
    names = list(sets)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            shared = sets[a] & sets[b]
            if shared and sets[a] != sets[b]:
                raise PlacementError(
                    f"{KEY_PREFIX}: {a} ({_ranges(sets[a])}) and {b} ({_ranges(sets[b])}) share "
                    f"devices {_ranges(shared)} but are not placed identically; in reasoning mode "
                    "components on shared GPUs take turns with their memory, so overlapping "
                    "components must use the same devices (or disjoint ones)"
                )


def build_plan(
    placement: Mapping[str, str | int] | None,
    roles: ComponentRoles,
    *,
    num_nodes: int,
    devices_per_node: int,
    device: str,
    fuse: bool = True,
) -> PlacementPlan:
    """Validate ``placement`` against the cluster and the components the config runs."""
    if num_nodes < 1:
        raise PlacementError(f"cluster.num_nodes: {num_nodes} must be >= 1")
    if devices_per_node < 1:
        raise PlacementError(f"cluster.devices_per_node: {devices_per_node} must be >= 1")
    defaulted = placement is None
    if placement is None:  # as the shipped configs run: one process, on slot 0
        placement = {",".join(roles.required): "0"}
    num_devices = num_nodes * devices_per_node
    allowed = roles.known
    slots: dict[str, list[ProcessSlot]] = {}
    for key, value in placement.items():
        names = split_key(key)
        for name in names:
            if name not in allowed:
                raise PlacementError(
                    f"{KEY_PREFIX}: unknown component '{name}' in key '{key}'"
                    f"{did_you_mean(name, allowed)}; mode {roles.mode} has {', '.join(allowed)}"
                )
            if name in slots or names.count(name) > 1:
                raise PlacementError(f"{KEY_PREFIX}: component '{name}' is placed twice")
        parsed = parse_value(key, value, num_devices, devices_per_node)
        for name in names:
            slots[name] = parsed
    missing = [name for name in roles.required if name not in slots]
    if missing:
        optional = f" (optional: {', '.join(roles.optional)})" if roles.optional else ""
        raise PlacementError(
            f"{KEY_PREFIX}: no placement for {', '.join(missing)}; this config runs "
            f"{', '.join(roles.required)}{optional}"
        )
    skipped = {name: roles.unused[name] for name in slots if name in roles.unused}
    order = [n for n in allowed if n in slots and n not in skipped]
    components = {
        name: tuple(
            RankPlacement(
                rank=s.rank,
                node=s.devices[0] // devices_per_node,
                devices=tuple(d % devices_per_node for d in s.devices),
                global_devices=s.devices,
                share=s.share,
            )
            for s in slots[name]
        )
        for name in order
    }
    sets = {name: frozenset(d for s in slots[name] for d in s.devices) for name in order}
    if roles.mode == "reasoning":
        _check_reasoning_overlaps(sets)
    return PlacementPlan(
        layout=_layout(sets),
        num_nodes=num_nodes,
        devices_per_node=devices_per_node,
        device=device,
        components=components,
        fused=_fusion_groups(components, fuse),
        skipped=skipped,
        defaulted=defaulted,
    )


def _fusion_groups(
    components: dict[str, tuple[RankPlacement, ...]], fuse: bool
) -> tuple[tuple[str, ...], ...]:
    """Components whose every rank sits on the same devices with the same share share processes."""
    if not fuse:
        return tuple((name,) for name in components)
    groups: dict[tuple, list[str]] = {}
    for name, ranks in components.items():
        signature = tuple((r.global_devices, r.share) for r in ranks)
        groups.setdefault(signature, []).append(name)
    return tuple(tuple(g) for g in groups.values())
