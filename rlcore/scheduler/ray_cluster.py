"""Connect to Ray (start a local one or join a cluster) and reserve the plan's slots on it."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
from dataclasses import dataclass
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group

from rlcore.config.errors import ConfigError
from rlcore.placement import PlacementPlan
from rlcore.scheduler import reaper
from rlcore.scheduler.join import JOIN_TIMEOUT_S, join
from rlcore.scheduler.network import local_ray_node

NODE_ID_LABEL = "ray.io/node-id"


class SchedulerError(ConfigError):
    """The cluster cannot host the plan: raised before any worker starts, one line."""


def connect(plan: PlacementPlan, address: str | None, timeout_s: float = JOIN_TIMEOUT_S) -> bool:
    """Start or join Ray (joining within ``timeout_s``: join.py); True when this call started
    or joined it (and so must shut it down)."""
    if ray.is_initialized():
        return False
    common = {"include_dashboard": False, "log_to_driver": True, "configure_logging": False}
    if address is not None:
        join(address, timeout_s, lambda joined: ray.init(address=joined, **common))
        return True
    check_file_size_limit()
    # A CPU slot is a Ray CPU: ask for as many as the plan has, even past the core count.
    num_cpus = max(os.cpu_count() or 1, plan.devices_per_node) if plan.device == "cpu" else None
    # "local", not None: with None, Ray joins whatever /tmp/ray/ray_current_cluster names, even
    # a cluster that died long ago, instead of starting the local one asked for.
    with local_ray_node():  # every Ray server on 127.0.0.1 (network.py)
        ray.init(address="local", num_cpus=num_cpus, **common)
    global _watcher
    _watcher = reaper.start(os.getpid())
    return True


def check_file_size_limit() -> None:
    """Refuse a local Ray start under a file-size limit smaller than its object store: Ray sizes
    the store's file in /dev/shm to 30% of the memory, and under a smaller ``ulimit -f`` its
    node fails to start only after a 30 s wait, with a traceback."""
    import resource

    import psutil

    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    store = int(0.3 * psutil.virtual_memory().total)
    if limit != resource.RLIM_INFINITY and limit < store:
        raise SchedulerError(
            f"this placement runs its components on Ray, which cannot start under this "
            f"process's file-size limit ({limit >> 10} KiB, ulimit -f): its object store is a "
            f"file of {store >> 20} MiB; raise the limit (ulimit -f unlimited), or place every "
            "component in one process (cluster.component_placement), which needs no Ray"
        )


_watcher: subprocess.Popen | None = None  # reaper.py's watcher of the local Ray started here


def disconnect() -> None:
    """Shut down the Ray that ``connect`` started, and let its watcher go."""
    global _watcher
    ray.shutdown()
    if _watcher is not None:
        reaper.stop(_watcher)
        _watcher = None


@dataclass(frozen=True)
class NodeSlots:
    """The Ray node hosting plan node ``index``, and its placement group (bundle j = device j)."""

    index: int
    node_id: str
    ip: str
    group: PlacementGroup


# How long a node's raylet may take to accept a connection before the node counts as lost.
RAYLET_KNOCK_S = 1.0


def live_nodes() -> list[dict[str, Any]]:
    """The Ray nodes alive now: those the GCS counts alive whose raylet accepts a connection.
    The GCS declares a node dead only after missing its health checks (15 s by Ray's
    defaults); a machine that dropped off is known at once by its closed raylet port."""
    return [
        node
        for node in ray.nodes()
        if node["Alive"] and _answers(node["NodeManagerAddress"], node["NodeManagerPort"])
    ]


def alive_nodes() -> set[str]:
    """The ids of ``live_nodes``."""
    return {node["NodeID"] for node in live_nodes()}


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), RAYLET_KNOCK_S):
            return True
    except OSError:
        return False


def lost_node(ip: str, node_id: str) -> str:
    """How a lost node is named in a loss (its address, and its id's first 8 digits)."""
    return f"node {ip} ({node_id[:8]}) lost"


def _resource(plan: PlacementPlan) -> str:
    return "GPU" if plan.device == "cuda" else "CPU"


def pick_nodes(plan: PlacementPlan) -> list[dict[str, Any]]:
    """The Ray nodes for plan nodes 0..N-1 (head first, then by address); fails fast if too few."""
    resource = _resource(plan)
    alive = live_nodes()
    fit = [n for n in alive if n["Resources"].get(resource, 0) >= plan.devices_per_node]
    if len(fit) < plan.num_nodes:
        have = ", ".join(f"{n['Resources'].get(resource, 0):g}" for n in alive) or "none"
        raise SchedulerError(
            f"cluster.num_nodes/devices_per_node: the plan needs {plan.num_nodes} node(s) with "
            f"{plan.devices_per_node} {resource} each, but the Ray cluster's {len(alive)} node(s) "
            f"have {resource}: {have}; change the cluster keys or add nodes"
        )

    def order(node: dict[str, Any]) -> tuple:
        is_head = "node:__internal_head__" in node["Resources"]
        return (not is_head, node["NodeManagerAddress"], node["NodeID"])

    return sorted(fit, key=order)[: plan.num_nodes]


def reserve(plan: PlacementPlan, timeout_s: float, tag: str = "") -> list[NodeSlots]:
    """One placement group per node, pinned to it, one bundle per device slot, named
    ``rlcore-TAG-nodeI`` (``tag``: the scheduler's, so several can hold slots at once)."""
    bundle = {_resource(plan): 1.0}
    slots: list[NodeSlots] = []
    try:
        for index, node in enumerate(pick_nodes(plan)):
            group = placement_group(
                [dict(bundle) for _ in range(plan.devices_per_node)],
                strategy="STRICT_PACK",
                name=f"rlcore-{tag}-node{index}" if tag else f"rlcore-node{index}",
                bundle_label_selector=[
                    {NODE_ID_LABEL: node["NodeID"]} for _ in range(plan.devices_per_node)
                ],
            )
            slots.append(NodeSlots(index, node["NodeID"], node["NodeManagerAddress"], group))
            ready, _ = ray.wait([group.ready()], timeout=timeout_s)
            if not ready:
                raise SchedulerError(
                    f"cluster: could not reserve {plan.devices_per_node} {_resource(plan)} on node "
                    f"{index} ({node['NodeManagerAddress']}) within {timeout_s:g} s; another job "
                    "may hold them"
                )
    except BaseException:
        release(slots)
        raise
    return slots


def release(slots: list[NodeSlots]) -> None:
    for slot in slots:
        # The cluster may already be gone (Ctrl-C, crash): then there is nothing to free.
        with contextlib.suppress(Exception):
            remove_placement_group(slot.group)
