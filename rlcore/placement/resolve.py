"""From a validated config to a plan: detect the devices, then place the components."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace

from rlcore.config.checks import component_sections
from rlcore.config.schema import ClusterConfig, RLCoreConfig
from rlcore.placement.checks import check_plan
from rlcore.placement.components import component_roles
from rlcore.placement.grammar import PlacementError
from rlcore.placement.plan import PlacementPlan, build_plan


@dataclass(frozen=True)
class ClusterSpec:
    num_nodes: int
    devices_per_node: int
    device: str  # cuda | cpu


def visible_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_cluster(cluster: ClusterConfig, gpus: Callable[[], int] = visible_gpus) -> ClusterSpec:
    """Fill in ``device: auto`` and ``devices_per_node: null`` from this machine.

    On a cluster joined with ``cluster.address``, the scheduler checks the result against the
    cluster's real resources before starting anything.
    """
    device = cluster.device
    detected = None
    if device == "auto" or (device == "cuda" and cluster.devices_per_node is None):
        detected = gpus()
    if device == "auto":
        device = "cuda" if detected else "cpu"
    if cluster.devices_per_node is not None:
        per_node = cluster.devices_per_node
    elif device == "cuda":
        if not detected:
            raise PlacementError(
                "cluster.device: cuda, but no GPU is visible here; set cluster.devices_per_node "
                "to plan for another machine, or use cluster.device=cpu"
            )
        per_node = detected
    else:
        per_node = os.cpu_count() or 1
    return ClusterSpec(cluster.num_nodes, per_node, device)


def plan_for_config(config: RLCoreConfig, gpus: Callable[[], int] = visible_gpus) -> PlacementPlan:
    """The placement plan of ``config`` on the cluster it describes, checked against the run's
    batch sizes (``checks.py``); ``PlacementError`` if there is none."""
    if config.cluster.component_placement == "auto":
        raise PlacementError(
            "cluster.component_placement: auto is chosen by the entry points (rlcore embodied, "
            "rlcore reasoning, examples/*/main.py, rlcore placement --advise), which profile "
            "the config first; give this caller a placement, e.g. the one `rlcore placement "
            "CONFIG --advise` prints"
        )
    spec = resolve_cluster(config.cluster, gpus)
    plan = build_plan(
        config.cluster.component_placement,
        component_roles(config),
        num_nodes=spec.num_nodes,
        devices_per_node=spec.devices_per_node,
        device=spec.device,
        fuse=config.cluster.fuse_collocated,
    )
    check_plan(config, plan)
    named = {
        c: s.group_name
        for c, s in component_sections(config).items()
        if s.group_name is not None and c in plan.components
    }
    return replace(plan, group_names=named)
