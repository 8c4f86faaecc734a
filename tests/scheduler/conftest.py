import pytest
import ray
import ray.cloudpickle

from rlcore.scheduler import warm
from tests.quiet_ray import quiet_nodes
from tests.scheduler import components

# Workers cannot import the tests package; send these classes by value instead.
ray.cloudpickle.register_pickle_by_value(components)


@pytest.fixture(scope="module")
def fake_gpu_cluster(ray_session):
    """Two simulated nodes with 4 GPUs each (fake GPU resources on a CPU machine), in place of
    this worker's local Ray while the module runs."""
    from ray.cluster_utils import Cluster

    ray_session.stop()
    with quiet_nodes() as (head, node):  # (tests/quiet_ray.py)
        cluster = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": 2, "num_gpus": 4, **head},
            shutdown_at_exit=True,
        )
        cluster.add_node(num_cpus=2, num_gpus=4, **node)
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    cluster.wait_for_nodes()
    alive = [n for n in ray.nodes() if n["Alive"]]
    head = next(n["NodeID"] for n in alive if "node:__internal_head__" in n["Resources"])
    other = next(n["NodeID"] for n in alive if n["NodeID"] != head)
    yield [head, other]
    warm.release()  # (a scheduler its tests kept, on this cluster)
    ray.shutdown()
    cluster.shutdown()
