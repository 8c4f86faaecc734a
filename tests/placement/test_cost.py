"""The placement cost model on hand-computed cases (rlcore/placement/cost.py's docstring gives
the rules; each expected value below is worked out from them by hand, in the comments)."""

import dataclasses
import math

import pytest

from rlcore.placement.cost import Candidate, Link, Profile, Work, predict

# Embodied, measured in one process: collect 1.0 s (env 0.4, rollout 0.5, the driver 0.1),
# advantages 0.05 (the driver), update 0.8 (the actor), sync 0.01 (an in-process copy).
EMBODIED = Profile(
    mode="embodied",
    threads=1,
    stages={"sync": 0.01, "collect": 1.0, "advantages": 0.05, "update": 0.8},
    work={
        "collect": {
            "env": Work(0.4, calls=100, bytes=1e6, caller="rollout"),
            "rollout": Work(0.5, calls=1, bytes=2e6),
        },
        "update": {"actor": Work(0.8, calls=1, bytes=2e6)},
    },
    link=Link(latency_s=0.001, bytes_per_s=1e9),
    weight_bytes=1e6,
    grad_steps={"actor": 4},
    grad_bytes={"actor": 1e6},
)
ALL = ("env", "rollout", "actor")


def test_one_process_is_the_measured_iteration():
    # nothing crosses a process: 0.01 + 1.0 + 0.05 + 0.8
    got = predict(Candidate(((ALL, (0,)),)), EMBODIED)
    assert got.iteration_s == pytest.approx(1.86)
    assert got.bottleneck == "collect"


def test_env_apart_pays_its_calls():
    # sync 0.01 (actor and rollout in one process);
    # collect: driver 0.1 + env 0.4 + 100 x 0.001 + 1e6 / 1e9 + rollout 0.5 + 0.001 + 2e-3
    #   = 0.1 + 0.501 + 0.503 = 1.104; advantages 0.05; update 0.8 + 0.001 + 0.002 = 0.803
    got = predict(Candidate(((("env",), (0,)), (("rollout", "actor"), (1,)))), EMBODIED)
    assert got.iteration_s == pytest.approx(0.01 + 1.104 + 0.05 + 0.803)
    assert got.stages["collect"] == pytest.approx(1.104)


def test_two_env_stages_overlap_env_and_rollout():
    # a step call per stage: the env's part 0.4 + 200 x 0.001 + 1e6 / 1e9 = 0.601;
    # collect: 0.1 + max(0.601, 0.503, (0.601 + 0.503) / 2) = 0.701
    groups = ((("env",), (0,)), (("rollout", "actor"), (1,)))
    got = predict(Candidate(groups, pipeline_stage_num=2), EMBODIED)
    assert got.stages["collect"] == pytest.approx(0.701)
    assert got.iteration_s == pytest.approx(0.01 + 0.701 + 0.05 + 0.803)


def test_stages_on_one_slot_take_turns():
    # env and rollout in separate processes on the same slot: no overlap, e + r, and the
    # second stage's 100 more step calls cost 100 x 0.001
    groups = ((("env",), (0,)), (("rollout",), (0,)), (("actor",), (1,)))
    one = predict(Candidate(groups, pipeline_stage_num=1), EMBODIED)
    two = predict(Candidate(groups, pipeline_stage_num=2), EMBODIED)
    assert two.stages["collect"] == pytest.approx(one.stages["collect"] + 0.1)


def test_data_parallel_splits_work_and_all_reduces():
    # 2 ranks of everything: collect 0.1 + env 0.4 / 2 (its caller shares its process)
    #   + rollout 0.5 / 2 + 0.001 + 2e6 / 2 / 1e9 = 0.1 + 0.2 + 0.252 = 0.552;
    # update 0.8 / 2 + 0.001 + 0.001 + 4 steps x (0.001 + 1e6 x 2 x 1/2 / 1e9) = 0.41
    got = predict(Candidate(((ALL, (0, 1)),)), EMBODIED)
    assert got.stages["collect"] == pytest.approx(0.552)
    assert got.stages["update"] == pytest.approx(0.41)
    assert got.iteration_s == pytest.approx(0.01 + 0.552 + 0.05 + 0.41)


def test_staleness_one_overlaps_collection_and_training():
    # collect beside training: 0.1 + 0.4 + 0.503 + the sync it takes (0.001 + 1e6 / 1e9)
    #   = 1.005; training: advantages 0.05 + update 0.803 = 0.853;
    # slot 0's load: env 0.4 + rollout 0.503 = 0.903; slot 1's: 0.803. The collection wins.
    groups = ((("env", "rollout"), (0,)), (("actor",), (1,)))
    got = predict(Candidate(groups, max_staleness=1), EMBODIED)
    assert got.iteration_s == pytest.approx(1.005)
    assert got.bottleneck.startswith("collect")


REASONING = Profile(
    mode="reasoning",
    threads=1,
    stages={
        "sync": 0.0,
        "generate": 2.0,
        "reward": 0.1,
        "logprob": 0.5,
        "ref": 0.5,
        "advantages": 0.05,
        "actor_update": 1.0,
    },
    work={
        "generate": {"rollout": Work(2.0)},
        "reward": {"reward": Work(0.1)},
        "logprob": {"actor": Work(0.5)},
        "ref": {"ref": Work(0.5)},
        "actor_update": {"actor": Work(1.0)},
    },
    link=Link(latency_s=0.0, bytes_per_s=math.inf),  # transit free: the schedule alone
    reuses_log_probs=True,
)
REASONING_ALL = ("actor", "ref", "rollout", "reward")


def test_the_old_log_probs_pass_only_where_the_rollout_is_apart():
    # one process reuses the rollout's log-probs: 4.15 - 0.5; apart, the actor recomputes them
    one = predict(Candidate(((REASONING_ALL, (0,)),)), REASONING)
    assert one.iteration_s == pytest.approx(3.65)
    assert "logprob" not in one.stages
    groups = ((("actor", "ref"), (0,)), (("rollout", "reward"), (1,)))
    apart = predict(Candidate(groups), REASONING)
    assert apart.iteration_s == pytest.approx(4.15)


def test_asynchronous_training_side_is_the_bottleneck():
    # generation beside training: 2.0; training: reward 0.1 + advantages 0.05 + the passes side
    # by side (logprob and ref both on slot 0: 1.0) + the update 1.0 = 2.15; slot loads:
    # slot 0 2.0, slot 1 2.0 + 0.1 = 2.1. Training wins.
    groups = ((("actor", "ref"), (0,)), (("rollout", "reward"), (1,)))
    got = predict(Candidate(groups, max_staleness=1), REASONING)
    assert got.iteration_s == pytest.approx(2.15)
    assert got.bottleneck == "training"
    assert got.stages["passes"] == pytest.approx(1.0)


def test_asynchronous_passes_on_separate_slots_run_side_by_side():
    # ref on slot 2: passes max(0.5, 0.5) = 0.5; training 0.1 + 0.05 + 0.5 + 1.0 = 1.65;
    # generation 2.0 (slot 1 with the reward: 2.1) -> the busiest slot, 2.1
    groups = ((("actor",), (0,)), (("rollout", "reward"), (1,)), (("ref",), (2,)))
    got = predict(Candidate(groups, max_staleness=1), REASONING)
    assert got.stages["passes"] == pytest.approx(0.5)
    assert got.iteration_s == pytest.approx(2.1)
    assert got.bottleneck == "slot 1's load"


def test_asynchronous_weight_sync_holds_both_chains():
    # the copy costs 0.2 s between processes (measured); both the rollout and the actor wait for
    # it: generation 2.0 + 0.2 = 2.2; training 0.1 + 0.05 + 1.0 + 1.0 + 0.2 = 2.35; slot 0's
    # load 0.5 + 0.5 + 1.0 + 0.2 = 2.2, slot 1's 2.0 + 0.1 + 0.2 = 2.3. Training wins.
    synced = dataclasses.replace(REASONING, transit={"sync": 0.2})
    groups = ((("actor", "ref"), (0,)), (("rollout", "reward"), (1,)))
    got = predict(Candidate(groups, max_staleness=1), synced)
    assert got.iteration_s == pytest.approx(2.35)
    assert got.bottleneck == "training"
    # synchronously the copy is a stage of its own: 4.15 + 0.2
    assert predict(Candidate(groups), synced).iteration_s == pytest.approx(4.35)


def test_the_iterations_seconds_outside_its_stages_are_the_drivers():
    # 0.03 s an iteration of the driver's own bookkeeping in one process, 0.02 s more when the
    # components' results come from processes: one process 3.65 + 0.03; apart, synchronous,
    # 4.15 + 0.05; asynchronous, on the training side: 2.15 + 0.05 = 2.2 (slot 1's load 2.1)
    booked = dataclasses.replace(
        REASONING, stages={**REASONING.stages, "other": 0.03}, transit={"other": 0.02}
    )
    assert predict(Candidate(((REASONING_ALL, (0,)),)), booked).iteration_s == pytest.approx(3.68)
    groups = ((("actor", "ref"), (0,)), (("rollout", "reward"), (1,)))
    assert predict(Candidate(groups), booked).iteration_s == pytest.approx(4.2)
    got = predict(Candidate(groups, max_staleness=1), booked)
    assert got.iteration_s == pytest.approx(2.2)
    assert got.bottleneck == "training"


def test_placement_as_written():
    c = Candidate(((("env",), (0,)), (("rollout", "actor"), (1, 2, 3))))
    assert c.placement() == {"env": "0", "rollout,actor": "1-3"}
    assert c.processes() == 4


# ... and with what calls between processes were measured to cost this config's batches: the
# wall seconds a call adds per stage, and the CPU seconds each side spends on it
MEASURED = dataclasses.replace(
    EMBODIED,
    transit={"collect": 0.003, "update": 0.01, "sync": 0.004},
    call_cpu={"env": 0.001, "rollout": 0.001, "actor": 0.002, "driver": 0.001},
    cores=2,
)


def test_measured_transit_replaces_the_link():
    # sync 0.01 (actor and rollout together); collect 0.1 + env 0.4 + 100 x 0.003
    #   + rollout 0.5 + 0.003 = 1.303; advantages 0.05; update 0.8 + 0.01 = 0.81
    got = predict(Candidate(((("env",), (0,)), (("rollout", "actor"), (1,)))), MEASURED)
    assert got.iteration_s == pytest.approx(0.01 + 1.303 + 0.05 + 0.81)


def test_asynchronous_with_measured_calls_and_the_cores_load():
    # collection 0.1 + 0.4 + 0.5 + 0.003, its sync 0.01 + 0.004: 1.017; training 0.05 +
    # max(slot 1's 0.8 + 0.002, the update's 0.81) = 0.86; slot 0's load 0.4 + 0.5 + 0.001;
    # the cores': (0.901 + 0.802 + the driver's 0.1 + 0.05 + 0.001 + 0.001) / 2 = 0.9275
    groups = ((("env", "rollout"), (0,)), (("actor",), (1,)))
    got = predict(Candidate(groups, max_staleness=1), MEASURED)
    assert got.iteration_s == pytest.approx(1.017)
    assert got.stages["updates"] == pytest.approx(0.81)
    # on one core the same work is 1.855 s of CPU an iteration, more than any chain
    one_core = predict(Candidate(groups, max_staleness=1), dataclasses.replace(MEASURED, cores=1))
    assert one_core.iteration_s == pytest.approx(1.855)
    assert one_core.bottleneck == "the cores' load"


def test_ranks_on_two_nodes_all_reduce_through_the_slower_link():
    # the update on 2 ranks: 0.8 / 2; the driver's call 0.001 + 2e6 / 2 at the link's rate;
    # 4 all-reduces of 2 x 1/2 x 1e6 bytes, each with its latency. One node (1e9 B/s):
    # 0.4 + 0.002 + 0.004 + 0.004 = 0.41; two nodes (1e8 B/s between them): 0.4 + 0.011 +
    # 0.004 + 0.04 = 0.455
    link = Link(latency_s=0.001, bytes_per_s=1e9, inter_node_bytes_per_s=1e8)
    profile = dataclasses.replace(EMBODIED, link=link)
    one = predict(Candidate(((ALL, (0, 1)),), devices_per_node=2), profile)
    two = predict(Candidate(((ALL, (0, 1)),), devices_per_node=1), profile)
    assert one.stages["update"] == pytest.approx(0.41)
    assert two.stages["update"] == pytest.approx(0.455)


def test_a_faster_device_divides_the_computed_seconds():
    from rlcore.placement.cost import scaled

    fast = scaled(EMBODIED, 2.0)
    assert fast.work["update"]["actor"].seconds == pytest.approx(0.4)
    assert fast.stages["collect"] == pytest.approx(0.5)
    assert predict(Candidate(((ALL, (0,)),)), fast).iteration_s == pytest.approx(1.86 / 2)


def test_measured_data_parallel_seconds_stand_for_the_all_reduces():
    # measured on 2 ranks: the update 0.05 s beyond its split work. On 2 ranks the update is
    # 0.8 / 2 + the driver's call (0.001 + 2e6 / 2 / 1e9) + 0.05 = 0.452, no all-reduce from
    # the link; on 4 ranks (not measured) the link's: 0.2 + 0.0015 + 4 x (0.001 + 1.5e6 / 1e9)
    profile = dataclasses.replace(EMBODIED, parallel={"update": 0.05}, parallel_ranks=2)
    two = predict(Candidate(((ALL, (0, 1)),)), profile)
    assert two.stages["update"] == pytest.approx(0.452)
    four = predict(Candidate(((ALL, (0, 1, 2, 3)),)), profile)
    assert four.stages["update"] == pytest.approx(0.2 + 0.0015 + 4 * (0.001 + 1.5e-3))
