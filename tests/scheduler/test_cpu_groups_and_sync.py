"""On CPU slots: a torch.distributed group per component, and bit-exact weight sync. The tests
of one plan follow each other and share its processes (``schedulers``)."""

import inspect

import pytest
import torch

from rlcore.placement import ComponentRoles, build_plan
from rlcore.scheduler import Scheduler
from tests.scheduler.components import EnvStepper, Model, PushedModel, StuckInC

ROLES = ComponentRoles("embodied", ("actor", "rollout"))


def cpu_plan(placement, fuse=True):
    return build_plan(placement, ROLES, num_nodes=1, devices_per_node=2, device="cpu", fuse=fuse)


def equal_weights(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def schedulers(ray_session):
    """``scheduler(placement, fuse, bucket)``: a started Scheduler of that plan, shared by the
    module's consecutive tests of one plan (each launches its components anew in the plan's
    processes). One at a time: the next plan's scheduler adopts the processes that stand on
    its slots (``rlcore.scheduler.warm``: the session keeps processes warm) instead of starting
    all of its own."""
    ray_session.ensure()
    current: dict[tuple, Scheduler] = {}

    def scheduler(placement, fuse=True, bucket=512 << 20):
        key = (tuple(sorted(placement.items())), fuse, bucket)
        if key not in current:
            for previous in current.values():
                previous.stop(keep_warm=True)
            current.clear()
            current[key] = Scheduler(cpu_plan(placement, fuse), sync_bucket_bytes=bucket)
            current[key].start()
        return current[key]

    yield scheduler
    for started in current.values():
        started.stop(keep_warm=True)


# The tests run in the order of their plans' processes, from the smallest shares of a slot to
# whole slots, so that each plan's scheduler adopts the processes the previous one kept warm
# (a kept process serves a new one on its slot with at most its share: rlcore.scheduler.warm)
# and only the first plan starts processes: 6 where the order of topics started 13 (each
# about 2 CPU-s here: Ray's worker, torch, a gloo group).


def test_each_component_gets_its_own_gloo_group(schedulers):
    scheduler = schedulers({"actor": "0-1", "rollout": "0-1:0-3"})
    actor = scheduler.launch("actor", Model, 0)
    rollout = scheduler.launch("rollout", Model, 0)
    assert actor.call_all("rank_sum") == [0.0 + 1.0] * 2
    assert rollout.call_all("rank_sum") == [0.0 + 1.0 + 2.0 + 3.0] * 4
    env = actor.call_rank(1, "dist_env")
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]) == ("1", "2", "1")
    assert env["MASTER_ADDR"] and int(env["MASTER_PORT"]) > 0
    assert rollout.call_rank(0, "dist_env")["MASTER_PORT"] != env["MASTER_PORT"]


def test_scatter_futures_and_one_rank_calls(schedulers):
    scheduler = schedulers({"actor": "0-1", "rollout": "0-1:0-3"})
    rollout = scheduler.launch("rollout", Model, 0)
    assert rollout.scatter("echo", ["a", "b", "c", "d"], tag="t") == [
        (0, "a", "t"),
        (1, "b", "t"),
        (2, "c", "t"),
        (3, "d", "t"),
    ]
    futures = rollout.call_all_async("echo", "x")  # returns at once; work overlaps
    assert rollout.get(futures) == [(r, "x", "") for r in range(4)]
    assert rollout.call_rank(2, "echo", "y") == (2, "y", "")
    with pytest.raises(ValueError, match="one shard per rank \\(4\\), got 3"):
        rollout.scatter("echo", ["a", "b", "c"])


# Buckets of 40 bytes cut Model's tensors (sorted: 32, 256, 8, 64, 6 and 8 bytes) into
# [0.bias] [0.weight] (alone: larger than a bucket) [1.bias] [1.weight] [scale (bf16), step
# (int64)]: one message per bucket, a bucket of mixed dtypes among them.
SMALL = 40


def test_a_receiver_that_takes_pushed_buckets_gets_every_one(schedulers):
    """A receiver whose weights live outside its process (an SGLang engine) is handed each
    40-byte bucket as named tensors, whatever way the bucket travelled (4 receivers; on CPU
    slots one node's processes can all share memory with the actor's rank, so IPC pairs them
    too). The in-process path: tests/workers/test_sglang_engine.py."""
    scheduler = schedulers({"actor": "0", "rollout": "0-1:0-3"}, bucket=SMALL)
    actor = scheduler.launch("actor", Model, 1)
    rollout = scheduler.launch("rollout", PushedModel, 2)
    for i, method in enumerate(("collective", "object_store", "ipc")):
        actor.call_all("reseed", 10 + i)  # new weights for each sync
        assert scheduler.sync_weights("actor", "rollout", method=method).method == method
        source = actor.call_rank(0, "snapshot")
        assert all(equal_weights(source, w) for w in rollout.call_all("snapshot")), method
        assert rollout.call_all("buckets_loaded") == [5 * (i + 1)] * 4  # see SMALL


@pytest.mark.parametrize(
    ("placement", "method", "expected", "bucket", "fuse"),
    [
        ({"actor": "0", "rollout": "0-1:0-3"}, "collective", "collective", SMALL, True),  # 4 ranks
        # collocated, not fused: each actor rank hands its own rollout rank the buckets (the
        # CUDA IPC path of a shared GPU; named shared memory on CPU slots)
        ({"actor,rollout": "0-1"}, "ipc", "ipc", SMALL, False),
        ({"actor,rollout": "0-1"}, "auto", "in_process", SMALL, True),  # collocated, fused
        ({"actor": "0", "rollout": "1"}, "object_store", "object_store", SMALL, True),
        ({"actor": "0", "rollout": "1"}, "auto", "collective", 512 << 20, True),  # disaggregated
    ],
)
def test_after_a_sync_every_rollout_rank_equals_the_actor_bit_for_bit(
    schedulers, placement, method, expected, bucket, fuse
):
    scheduler = schedulers(placement, fuse, bucket)
    actor = scheduler.launch("actor", Model, 1)
    rollout = scheduler.launch("rollout", Model, 2)  # another seed: different weights
    source = actor.call_rank(0, "snapshot")
    assert not any(equal_weights(source, w) for w in rollout.call_all("snapshot"))
    report = scheduler.sync_weights("actor", "rollout", method=method)
    assert report.method == expected
    floats = 8 * 8 + 8 + 8 * 2 + 2
    assert report.num_tensors == 6 and report.num_bytes == 4 * floats + 2 * 3 + 8
    assert all(equal_weights(source, w) for w in rollout.call_all("snapshot"))
    # a second sync reuses the group and still matches after the actor changes
    actor.call_all("reseed", 3)
    scheduler.sync_weights("actor", "rollout", method=method)
    updated = actor.call_rank(0, "snapshot")
    assert not equal_weights(source, updated)
    assert all(equal_weights(updated, w) for w in rollout.call_all("snapshot"))


def test_mismatched_weights_are_refused_with_the_tensor_names(schedulers):
    scheduler = schedulers({"actor": "0", "rollout": "1"})
    scheduler.launch("actor", Model, 1)
    scheduler.launch("rollout", Model, 1)
    scheduler.sync_weights("actor", "rollout")  # the same tensors: their layout is kept
    scheduler.launch("rollout", Model, 1, width=4)  # built anew, with other tensors
    with pytest.raises(ValueError, match=r"weight sync actor -> rollout: .*0\.weight"):
        scheduler.sync_weights("actor", "rollout")


def test_in_process_sync_is_refused_between_separate_processes(schedulers):
    scheduler = schedulers({"actor": "0", "rollout": "1"})
    scheduler.launch("actor", Model, 1)
    scheduler.launch("rollout", Model, 1)
    with pytest.raises(ValueError, match="in_process is impossible"):
        scheduler.sync_weights("actor", "rollout", method="in_process")


@pytest.mark.parametrize(
    ("placement", "fuse", "device", "expected"),
    [
        ({"actor,rollout": "0-1"}, True, "cuda", "in_process"),
        ({"actor": "0-1", "rollout": "2-3"}, True, "cuda", "collective"),
        # unfused on the same GPUs: NCCL refuses a group holding one GPU twice; each rollout
        # rank shares a GPU with an actor rank, which hands it CUDA IPC handles
        ({"actor,rollout": "0-1"}, False, "cuda", "ipc"),
        ({"actor": "0-1", "rollout": "0-1:0-3"}, True, "cuda", "ipc"),  # 2 rollouts per GPU
        # 2 rollouts on GPU 2, where no actor rank is: no IPC pairing
        ({"actor": "0-1", "rollout": "2:0-1"}, True, "cuda", "object_store"),
        ({"actor,rollout": "0-1"}, False, "cpu", "collective"),  # gloo minds no sharing
    ],
)
def test_the_sync_method_follows_the_placement(placement, fuse, device, expected):
    from rlcore.scheduler.weight_sync import WeightSync

    plan = build_plan(placement, ROLES, num_nodes=1, devices_per_node=4, device=device, fuse=fuse)
    sync = WeightSync(
        plan, group=None, info={}, backend="nccl", timeout_s=1, collective_timeout_s=1
    )
    assert sync.choose("actor", "rollout") == expected


def test_a_worker_stuck_in_c_code_is_ended_by_its_watchdog_and_named(schedulers):
    """An in-process env step that holds the GIL ignores env.step_timeout_s's timer signal:
    the watchdog ends the process after the grace, and the driver's account of the lost process
    names the watchdog, its limit and the env's line, in one line. (A plan of its own: its
    process dies.)"""
    scheduler = schedulers({"actor,rollout": "0"})
    stepper = scheduler.launch("actor", EnvStepper)
    with pytest.raises(Exception):  # noqa: B017 (how Ray reports a death is Ray's)
        stepper.call_rank(0, "step_stuck_env", 0.2, 0.3)
    [(components, rank, node, cause)] = scheduler.dead_processes()
    line = inspect.getsourcelines(StuckInC.step)[1] + 3  # the sum(...) line
    assert cause == (
        "the process died: its watchdog ended it: a call was still running after 0.5 s at "
        f"{inspect.getsourcefile(StuckInC)}:{line} in step, in code that a timeout cannot "
        "interrupt (C code holding the GIL); fix that code, or raise the limit "
        "(env.step_timeout_s)"
    )
    assert (set(components), rank, node) == ({"actor", "rollout"}, 0, 0)
