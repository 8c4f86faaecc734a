"""On 2 simulated nodes x 4 GPUs, every worker runs exactly where the plan puts it."""

import time

import pytest
import ray

from rlcore.placement import ComponentRoles, build_plan
from rlcore.scheduler import Scheduler, SchedulerError, WorkerError, warm
from rlcore.scheduler.processes import alive
from tests.scheduler.components import Probe

ROLES = ComponentRoles("embodied", ("actor", "rollout"), optional=("env",))


def gpu_plan(placement, nodes=2, per_node=4):
    return build_plan(placement, ROLES, num_nodes=nodes, devices_per_node=per_node, device="cuda")


# The tests run in an order in which each scheduler adopts what the previous one kept warm
# (rlcore.scheduler.warm: a kept process serves a new one on its node and devices with at most
# its share of them), as the runs of one program would: half-GPU processes first (those of
# shared GPUs, then the hybrid layout's), then whole-GPU ones. Each test still checks where its
# own processes stand; in the order of the layouts alone, 32 processes started, here 18 (each
# about 0.7 CPU-s of Ray's worker start on these 2 cores).


def test_shared_gpus_are_split_between_unfused_components(fake_gpu_cluster):
    plan = build_plan(
        {"actor,rollout": "0-1"}, ROLES, num_nodes=2, devices_per_node=4, device="cuda", fuse=False
    )
    assert [p.fraction for p in plan.processes()] == [0.5, 0.5, 0.5, 0.5]
    with Scheduler(plan, init_distributed=False) as scheduler:
        actor = scheduler.launch("actor", Probe).call_all("where")
        rollout = scheduler.launch("rollout", Probe).call_all("where")
    assert [a["gpu_ids"] for a in actor] == [r["gpu_ids"] for r in rollout] == [[0], [1]]
    assert actor[0]["pid"] != rollout[0]["pid"]


@pytest.mark.parametrize(
    ("placement", "layout"),
    [
        # 8 processes over both nodes (16 with env 0-3, rollout 4-7, actor 0-7: 10 s more)
        ({"env": "0,4", "rollout": "1,5", "actor": "0-1,4-5"}, "hybrid"),
        ({"actor,rollout,env": "all"}, "collocated"),
        ({"actor": "0-3", "rollout": "4-7"}, "disaggregated"),
    ],
)
def test_each_worker_runs_on_the_planned_node_and_gpu(fake_gpu_cluster, placement, layout):
    plan = gpu_plan(placement)
    assert plan.layout == layout
    with Scheduler(plan, init_distributed=False) as scheduler:
        for component, ranks in plan.components.items():
            group = scheduler.launch(component, Probe)
            seen = group.call_all("where")
            for placed, inside in zip(ranks, seen, strict=True):
                where = f"{component} rank {placed.rank}"
                assert inside["node_id"] == fake_gpu_cluster[placed.node], where
                assert inside["gpu_ids"] == list(placed.devices), where
                assert inside["cuda_visible_devices"] == ",".join(map(str, placed.devices)), where
                assert inside["rank"] == placed.rank and inside["world_size"] == len(ranks)
            local_ranks = [s["local_rank"] for s in seen]
            per_node = [sum(1 for r in ranks if r.node == n) for n in (0, 1)]
            assert local_ranks == [i for count in per_node for i in range(count)]


def test_worker_error_names_component_rank_node_and_every_process_ends(fake_gpu_cluster):
    plan = gpu_plan({"actor": "0-3", "rollout": "4-7"})
    scheduler = Scheduler(plan, init_distributed=False)
    with pytest.raises(WorkerError) as caught, scheduler:
        rollout = scheduler.launch("rollout", Probe)
        pids = [s["pid"] for s in rollout.call_all("where")]
        pids += [s["pid"] for s in scheduler.launch("actor", Probe).call_all("where")]
        rollout.call_rank(2, "fail", "bad batch")
    message = str(caught.value)
    assert message.startswith("rollout rank 2 on node 1: ValueError: bad batch")
    assert "--- worker traceback ---" in message and "raise ValueError(message)" in message
    deadline = time.monotonic() + 20
    left = set(pids)
    while left and time.monotonic() < deadline:
        left = {pid for pid in left if alive(pid)}
        time.sleep(0.2)
    assert not left, f"worker processes still running: {left}"


def test_tensor_parallel_process_sees_all_its_gpus(fake_gpu_cluster):
    plan = gpu_plan({"actor": "0-3", "rollout": "4-7:0-1"})
    with Scheduler(plan, init_distributed=False) as scheduler:
        seen = scheduler.launch("rollout", Probe).call_all("where")
    assert [s["cuda_visible_devices"] for s in seen] == ["0,1", "2,3"]
    assert [s["node_id"] for s in seen] == [fake_gpu_cluster[1]] * 2


@pytest.mark.parametrize(
    ("nodes", "per_node", "needs"),
    [(3, 4, "needs 3 node(s) with 4 GPU each"), (2, 8, "needs 2 node(s) with 8 GPU each")],
)
def test_a_plan_larger_than_the_cluster_fails_fast(fake_gpu_cluster, nodes, per_node, needs):
    plan = gpu_plan({"actor,rollout": "all"}, nodes=nodes, per_node=per_node)
    start = time.monotonic()
    with pytest.raises(SchedulerError) as caught:
        Scheduler(plan, init_distributed=False).start()
    assert time.monotonic() - start < 10
    assert needs in str(caught.value) and "have GPU: 4, 4" in str(caught.value)


def test_gpus_held_by_another_job_fail_with_a_clear_error_not_a_hang(fake_gpu_cluster):
    from ray.util.placement_group import placement_group, remove_placement_group

    warm.release()  # no scheduler that an earlier test kept holds node 1's GPUs

    on_node_1 = [{"ray.io/node-id": fake_gpu_cluster[1]}]
    squatter = placement_group(
        [{"GPU": 4}], strategy="STRICT_PACK", bundle_label_selector=on_node_1
    )
    ray.get(squatter.ready())
    try:
        with pytest.raises(SchedulerError, match="could not reserve 4 GPU on node 1"):
            Scheduler(
                gpu_plan({"actor,rollout": "all"}), init_distributed=False, timeout_s=3
            ).start()
    finally:
        remove_placement_group(squatter)
