import pytest
import ray
import ray.cloudpickle

from tests.conftest import start_local_ray
from tests.scheduler import components

# Workers cannot import the tests package; send these classes by value instead.
ray.cloudpickle.register_pickle_by_value(components)


@pytest.fixture(scope="module")
def fake_gpu_cluster():
    """Two simulated nodes with 4 GPUs each (fake GPU resources on a CPU machine)."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 2, "num_gpus": 4},
        shutdown_at_exit=True,
    )
    cluster.add_node(num_cpus=2, num_gpus=4)
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    cluster.wait_for_nodes()
    alive = [n for n in ray.nodes() if n["Alive"]]
    head = next(n["NodeID"] for n in alive if "node:__internal_head__" in n["Resources"])
    other = next(n["NodeID"] for n in alive if n["NodeID"] != head)
    yield [head, other]
    ray.shutdown()
    cluster.shutdown()


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray with 2 CPU slots, shared by a module's tests (each Scheduler reuses it),
    listening on loopback only as a run's own does."""
    start_local_ray(num_cpus=2)
    yield
    ray.shutdown()
