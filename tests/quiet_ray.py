"""How the tests' Ray clusters start: without what ``ray.init`` would start and no test asks for
(the log monitor on every node, which forwards workers' output to drivers that do not take it,
``log_to_driver=False``; on the head the autoscaler's monitor and the dashboard; measured: a head
node 1.0 CPU-s and 1 s less a start without the two monitors; no idle workers started ahead of
use, which Ray starts for the first driver, as many as the node's CPUs up to the machine's, and
which took 1.0 CPU-s every 30 s between them, doing nothing, in a cluster that lives for most
of a pytest worker's run), and with their workers forked from a process that imported torch
and the rest (tests/ray_launch.py: a worker starts in milliseconds when it is needed)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from tests.ray_launch import launching

# a node's arguments (``ray.cluster_utils.Cluster.add_node``), and the head's
QUIET_NODE = {"include_log_monitor": False}
NO_PRESTART = {"prestart_worker_first_driver": False, "enable_worker_prestart": False}
QUIET_HEAD = {
    **QUIET_NODE,
    "include_dashboard": False,
    "no_monitor": True,
    "_system_config": NO_PRESTART,  # (the cluster's: the head's is every node's)
}


@contextlib.contextmanager
def quiet_nodes() -> Iterator[tuple[dict, dict]]:
    """Inside (the nodes are started inside: their raylets inherit the launch socket): the
    head's arguments and another node's."""
    with launching() as launch:
        yield {**QUIET_HEAD, **launch}, {**QUIET_NODE, **launch}
