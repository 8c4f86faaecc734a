"""A run on a cluster that loses a node (its raylet killed mid-run) restarts on the nodes left
when they can hold its plan, never on the dead node's kept slots. On a three-node loopback
cluster of its own (ray.cluster_utils), in place of this worker's local Ray while it runs."""

import os
import signal

import pytest
import ray
from ray._private import ray_constants

from rlcore.placement import plan_for_config
from rlcore.runners import supervisor
from rlcore.runners.embodied import EmbodiedRunner
from rlcore.scheduler import warm
from rlcore.scheduler.network import local_ray_node
from tests.quiet_ray import quiet_nodes
from tests.runners.test_supervisor import embodied


@pytest.fixture(scope="module")
def three_nodes(ray_session):
    """A head and two nodes of 2 CPUs each, every server on 127.0.0.1; Ray's own health
    checks (a node missing them is dead to the GCS after 15 s, long after the run noticed)."""
    from ray.cluster_utils import Cluster

    ray_session.stop()
    with local_ray_node(), quiet_nodes() as (head, node):  # (tests/quiet_ray.py)
        cluster = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": 2, **head},
            shutdown_at_exit=True,
        )
        for _ in range(2):
            cluster.add_node(num_cpus=2, **node)
        cluster.wait_for_nodes()
    yield cluster
    warm.release()
    if ray.is_initialized():
        ray.shutdown()
    cluster.shutdown()


def test_a_lost_node_is_not_reused_and_the_run_finishes_on_the_nodes_left(
    three_nodes, tmp_path, monkeypatch, capsys
):
    """The env runs alone on plan node 1; its node's raylet is killed after iteration 4
    (checkpoint 3 the newest). The restart drops the survivors' kept slots (one of them on the
    dead node), places node 1 on the cluster's third node, resumes from checkpoint 3 and ends;
    the restart line names the lost node."""
    config = embodied(
        tmp_path,
        "lost",
        f"cluster.address={three_nodes.address}",
        "cluster.num_nodes=2",
        "cluster.devices_per_node=1",
        "cluster.component_placement={env:1,rollout:0,actor:0}",
        "cluster.network_interface=lo",
        "runner.max_restarts=1",
    )
    attempts, killed = [], {}

    def build(config, plan, models=None, _build=supervisor.build_runner):
        runner = _build(config, plan, models)
        info = runner.components.scheduler.info
        attempts.append({name: i["node_id"] for (name, _), i in info.items()})
        return runner

    def iterate(self, iteration, _iterate=EmbodiedRunner.iterate):
        if iteration == 5 and not killed:
            info = self.components.scheduler.info[("env", 0)]
            node = next(n for n in three_nodes.worker_nodes if n.node_id == info["node_id"])
            killed.update(node_id=info["node_id"], ip=node.node_ip_address)
            # a machine that drops off: its raylet and the run's process on it end at once,
            # long before the GCS misses the node's health checks
            raylet = node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process
            raylet.kill()
            raylet.wait()
            os.kill(info["pid"], signal.SIGKILL)
        return _iterate(self, iteration)

    monkeypatch.setattr(supervisor, "build_runner", build)
    monkeypatch.setattr(EmbodiedRunner, "iterate", iterate)
    with local_ray_node():
        ray.init(address=three_nodes.address, include_dashboard=False, log_to_driver=False)
    summary = supervisor.run(config, plan_for_config(config))

    assert summary["iterations"] == 6 and summary["restarts"] == 1
    (restart,) = summary["restart_log"]
    assert (restart["components"], restart["node"]) == (["env"], 1)
    assert (restart["after_iteration"], restart["resumed_from"]) == (4, 3)
    lost = f"node {killed['ip']} ({killed['node_id'][:8]}) lost"
    assert restart["cause"] == lost
    first, second = attempts
    assert second["env"] != killed["node_id"]  # not the dead node's kept slot
    assert killed["node_id"] not in second.values()
    assert second["actor"] == first["actor"]  # the head is plan node 0 both times
    assert f"restart 1 of 1: env rank 0 on node 1: {lost}; it died after iteration 4" in (
        capsys.readouterr().err
    )
