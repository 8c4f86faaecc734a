from __future__ import annotations

import atexit
import contextlib
import os
import sys
from typing import TYPE_CHECKING

# Model hubs are unreachable here: anything that tries one must fail fast, not hang.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest

if TYPE_CHECKING:
    from ray.cluster_utils import Cluster


def pytest_configure(config):
    """In a process that runs tests: hypothesis' profile, torch's threads, and the fork
    server's imports, set before anything starts it (tests/forked.py's commands, the ranks of
    tests/rank_pool.py and rlcore.procpool's processes all fork from it). Not in pytest-xdist's
    controller, which only hands the tests out: importing torch there delayed the workers'
    start by about 3 s, and hypothesis by about 1 s."""
    if getattr(config, "workerinput", None) is None and config.getoption("numprocesses", None):
        return
    from hypothesis import settings

    # Derandomised so CI is reproducible; no deadline because these 2 shared cores are noisy.
    settings.register_profile("rlcore", derandomize=True, deadline=None, max_examples=60)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "rlcore"))

    import torch

    from tests import forked

    torch.set_num_threads(1)
    forked.context()


def pytest_unconfigure(config):
    """A pytest-xdist worker, its tests done and reported, ends without Python's teardown of
    its interpreter: freeing every module it imported (torch, transformers, Megatron, Ray...)
    took 3.5 s, which pytest-xdist's controller waits out before it ends the session."""
    if getattr(config, "workerinput", None) is not None:
        atexit.register(_exit_without_teardown)  # (registered last: runs first)


def _exit_without_teardown():
    atexit.unregister(_exit_without_teardown)
    atexit._run_exitfuncs()  # every other exit function, in their order (the ranks' pools...)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


# The files that take longest (seconds of one pytest worker in a -n 2 run, measured), run first:
# the two workers take files one at a time in the order collected (`make test` passes
# --no-loadscope-reorder: xdist would otherwise order files by their number of tests), so the
# last ones to run are short and neither worker waits long for the other at the end (the
# longest first, as in LPT scheduling). The rest keep their order. The two modules that put a
# cluster of their own in place of a worker's Ray come after every file that uses that Ray,
# long as they are: the worker that runs one then does not start its Ray again (3.4 CPU-s, and
# the processes it kept warm).
LONGEST_FIRST = (
    "tests/runners/test_reasoning.py",  # 59 s
    "tests/runners/test_supervisor.py",  # 50 s
    "tests/scheduler/test_ray_lifecycle.py",  # 41 s
    "tests/workers/test_megatron_backend.py",  # 25 s
    "tests/runners/test_layouts.py",  # 20 s
    "tests/runners/test_resume.py",  # 16 s
    "tests/runners/test_embodied.py",  # 15 s
    "tests/config/test_seeds.py",  # 8 s
    "tests/runners/test_warm_processes.py",  # 8 s (the worker's Ray)
    "tests/scheduler/test_join.py",  # 8 s (the worker's Ray)
    "tests/test_ray_launch.py",  # 7 s (the worker's Ray)
    "tests/runners/test_profiling.py",  # 6 s (the worker's Ray)
    "tests/scheduler/test_cpu_groups_and_sync.py",  # 7 s
    "tests/scheduler/test_fake_gpu_cluster.py",  # 28 s (a cluster of its own)
    "tests/runners/test_lost_node.py",  # 18 s (a cluster of its own)
    "tests/test_no_ray.py",  # 14 s
    "tests/workers/test_lm_actor.py",  # 13 s
    "tests/test_export.py",  # 12 s
    "tests/config/foreign/test_verl_examples.py",  # 10 s
    "tests/test_gpu_check.py",  # 8 s
    "tests/test_compile_marks.py",  # 8 s
    "tests/tools/test_python_sandbox.py",  # 8 s
    "tests/runners/test_interrupt.py",  # 6 s
    "tests/test_docs_commands.py",  # 5 s
    "tests/config/test_bad_configs.py",  # 5 s
    "tests/test_cli.py",  # 5 s
)


def pytest_collection_modifyitems(config, items):
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    root = config.rootpath

    def order(item):
        path = item.path.relative_to(root).as_posix()
        return rank.get(path, len(rank))

    items.sort(key=order)  # stable: the other files and each file's tests keep their order


@pytest.fixture(autouse=True)
def no_process_group_left_behind():
    """A test that starts a process group of this process alone (a one-rank FSDP2 or Megatron
    strategy does, as a run's single process would) leaves none behind for the next test in the
    same pytest worker, which may start its own: the group and Megatron's model-parallel state
    are torn down after the test that made them."""
    import torch.distributed as dist

    from rlcore.scheduler.worker import tear_down_model_parallel

    before = dist.is_initialized()
    yield
    if not before:
        tear_down_model_parallel()
    if dist.is_initialized() and not before:
        dist.destroy_process_group()


@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory):
    """``(config, model_dirs)``: the tiny reasoning model, built once for the session."""
    from rlcore.prepare import prepare_models
    from tests.lm_fixtures import tiny_config

    root = tmp_path_factory.mktemp("tiny_lm")
    config = tiny_config(root / "cache", root / "outputs")
    return config, prepare_models(config)


class RaySession:
    """The local Ray of one pytest worker process (on loopback, 4 CPU slots), started on first
    use and kept for every later test: each run joins it instead of starting and stopping its
    own (about 3.5 s a start on these 2 cores). A module that needs another cluster (simulated
    GPU nodes) stops it; the next test that asks for it starts it again. The runs that start
    their own Ray (through the entry point, in a subprocess) are tested elsewhere."""

    cluster = None

    def ensure(self) -> None:
        import ray

        if not ray.is_initialized():
            self.cluster = start_local_ray(num_cpus=4)

    def stop(self) -> None:
        import ray

        from rlcore.scheduler import warm

        warm.release()  # (processes kept warm live in this Ray)
        if ray.is_initialized():
            ray.shutdown()
        if self.cluster is not None:
            self.cluster.shutdown()
            self.cluster = None


@pytest.fixture
def fake_engines(monkeypatch):
    """SGLang engines started by the rollout adapter are tests/workers/fake_sglang.py's (sglang
    has no CPU build); the list of those started."""
    from rlcore.workers.reasoning import sglang_engine
    from tests.workers import fake_sglang

    started: list[fake_sglang.Engine] = []

    def start(**server_args):
        started.append(fake_sglang.Engine(**server_args))
        return started[-1]

    monkeypatch.setattr(sglang_engine, "start_engine", start)
    return started


@pytest.fixture(scope="session")
def ray_session():
    """This worker's local Ray; inside it, a run that ends cleanly keeps its processes for the
    next run of the same plan (``rlcore.scheduler.warm``), as a sweep in one program may
    (RLCORE_TESTS_COLD=1: every run starts its own, to compare)."""
    from rlcore.scheduler.warm import keep_processes_warm

    session = RaySession()
    warm = (
        contextlib.nullcontext() if os.environ.get("RLCORE_TESTS_COLD") else keep_processes_warm()
    )
    with warm:
        yield session
        session.stop()


@pytest.fixture
def local_ray(ray_session):
    """A local Ray, this worker's (see ``RaySession``)."""
    ray_session.ensure()


def start_local_ray(num_cpus: int) -> Cluster:
    """A local Ray for tests, listening on loopback only as a run's own does; the
    ``ray.cluster_utils.Cluster`` it runs on. Started as ``ray.init`` starts one, less the
    processes no test asks for (tests/quiet_ray.py; the suite starts it 6 times); its workers
    are forked from a process that imported torch and the rest (tests/ray_launch.py)."""
    import ray
    from ray.cluster_utils import Cluster

    from rlcore.scheduler.network import local_ray_node
    from tests.quiet_ray import quiet_nodes

    with local_ray_node(), quiet_nodes() as (head, _):
        head = {"num_cpus": num_cpus, "object_store_memory": 1 << 30, **head}
        cluster = Cluster(initialize_head=True, shutdown_at_exit=True, head_node_args=head)
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    return cluster
