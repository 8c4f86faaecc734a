"""Plans: components, nodes, layouts, fusion and the resources each process asks Ray for."""

import pytest

from rlcore.config.schema import ClusterConfig
from rlcore.placement import ComponentRoles, PlacementError, build_plan, resolve_cluster

EMBODIED = ComponentRoles("embodied", ("actor", "rollout", "env"))
REASONING = ComponentRoles(
    "reasoning", ("actor", "critic", "rollout", "reward"), unused={"ref": "no reference KL"}
)


def plan(placement, roles=EMBODIED, nodes=2, per_node=4, fuse=True):
    return build_plan(
        placement, roles, num_nodes=nodes, devices_per_node=per_node, device="cuda", fuse=fuse
    )


def test_global_ranks_map_to_nodes_and_local_devices():
    p = plan({"actor": "2-5", "rollout,env": "6-7"})
    assert [(r.node, r.devices) for r in p.components["actor"]] == [
        (0, (2,)),
        (0, (3,)),
        (1, (0,)),
        (1, (1,)),
    ]
    assert [(r.rank, r.node, r.devices) for r in p.components["env"]] == [
        (0, 1, (2,)),
        (1, 1, (3,)),
    ]


def test_layouts():
    assert plan({"actor,rollout,env": "all"}).layout == "collocated"
    assert plan({"actor": "0-3", "rollout": "4-5", "env": "6-7"}).layout == "disaggregated"
    assert plan({"env": "0", "actor,rollout": "1"}).layout == "disaggregated"
    assert plan({"env": "0-3", "rollout": "4-7", "actor": "0-7"}).layout == "hybrid"
    assert plan({"env": "0-1", "rollout": "1-2", "actor": "3"}).layout == "hybrid"


def test_default_placement_runs_the_required_components_in_one_process_and_says_so():
    p = plan(None, nodes=1, per_node=16)  # a 16-core laptop: not 16 ranks
    assert list(p.components) == ["actor", "rollout", "env"]
    assert p.layout == "collocated" and len(p.processes()) == 1
    assert all(p.device_set(c) == {0} for c in p.components)
    assert p.table().splitlines()[-1] == (
        "no cluster.component_placement: every component in one process on slot 0; place them "
        "to use more slots (docs/placement.md)"
    )
    assert "component_placement" not in plan({"actor,rollout,env": 0}).table()


def test_reasoning_rejects_partial_overlap_and_accepts_identical_or_disjoint():
    with pytest.raises(
        PlacementError, match=r"actor \(0-7\) and rollout \(4-7\) share devices 4-7"
    ):
        plan({"actor,critic,reward": "0-7", "rollout": "4-7"}, roles=REASONING)
    ok = plan({"actor,critic": "0-3", "rollout,reward": "4-7"}, roles=REASONING)
    assert ok.layout == "disaggregated"  # identically placed components count as one
    apart = plan({"actor": "0-1", "critic": "2-3", "rollout": "4-5", "reward": "6"}, REASONING)
    assert apart.layout == "disaggregated"
    mixed = plan({"actor,critic": "0-7", "rollout": "0-7:0-3", "reward": "0-7"}, roles=REASONING)
    assert mixed.layout == "collocated"


def test_unused_components_are_not_started_and_say_why():
    p = plan({"actor,critic,ref,rollout,reward": "all"}, roles=REASONING)
    assert "ref" not in p.components
    assert p.skipped == {"ref": "no reference KL"}


@pytest.mark.parametrize(
    ("placement", "message"),
    [
        (
            {"actr,rollout,env": "all"},
            "unknown component 'actr' in key 'actr,rollout,env' "
            "(did you mean 'actor'?); mode embodied has actor, rollout, env",
        ),
        ({"actor,rollout": "all", "env,actor": "0"}, "component 'actor' is placed twice"),
        ({"actor,rollout": "all"}, "no placement for env; this config runs actor, rollout, env"),
        ({"actor,,env": "all"}, "key 'actor,,env' has an empty component name"),
        ({"critic,actor,rollout,env": "all"}, "unknown component 'critic'"),
    ],
)
def test_component_errors(placement, message):
    with pytest.raises(PlacementError) as caught:
        plan(placement)
    assert str(caught.value) == f"cluster.component_placement: {message}" or message in str(
        caught.value
    )


def test_cluster_size_errors_name_the_key():
    with pytest.raises(PlacementError, match=r"^cluster.devices_per_node: 0 must be >= 1"):
        plan(None, per_node=0)
    with pytest.raises(PlacementError, match=r"^cluster.num_nodes: 0 must be >= 1"):
        plan(None, nodes=0)


def test_fused_components_share_one_process_per_rank():
    p = plan({"actor,rollout,env": "0-1"})
    assert p.fused == (("actor", "rollout", "env"),)
    procs = p.processes()
    assert [(pr.components, pr.rank, pr.devices, pr.fraction) for pr in procs] == [
        (("actor", "rollout", "env"), 0, (0,), 1.0),
        (("actor", "rollout", "env"), 1, (1,), 1.0),
    ]


def test_unfused_components_on_one_device_split_it():
    p = plan({"actor,rollout,env": "0"}, fuse=False)
    assert [(pr.components, pr.fraction) for pr in p.processes()] == [
        (("actor",), pytest.approx(1 / 3, abs=1e-4)),
        (("rollout",), pytest.approx(1 / 3, abs=1e-4)),
        (("env",), pytest.approx(1 / 3, abs=1e-4)),
    ]
    assert sum(pr.fraction for pr in p.processes()) <= 1.0  # Ray must be able to fit them


def test_processes_sharing_a_device_and_tensor_parallel_processes():
    p = plan({"actor": "0-1:0-3", "rollout": "4-7:0-1", "env": "2-3"})
    fractions = {(pr.components[0], pr.rank): (pr.devices, pr.fraction) for pr in p.processes()}
    assert fractions[("actor", 0)] == ((0,), 0.5)
    assert fractions[("actor", 3)] == ((1,), 0.5)
    assert fractions[("rollout", 1)] == ((2, 3), 1.0)


def test_json_has_exactly_the_documented_shape():
    p = plan({"actor,rollout": "0-1", "env": "4"})
    assert p.to_json() == {
        "mode": "disaggregated",  # actor and rollout together, env apart
        "num_nodes": 2,
        "devices_per_node": 4,
        "components": {
            "actor": [
                {"rank": 0, "node": 0, "devices": [0]},
                {"rank": 1, "node": 0, "devices": [1]},
            ],
            "rollout": [
                {"rank": 0, "node": 0, "devices": [0]},
                {"rank": 1, "node": 0, "devices": [1]},
            ],
            "env": [{"rank": 0, "node": 1, "devices": [0]}],
        },
    }


def test_device_detection():
    cpu = resolve_cluster(ClusterConfig(), gpus=lambda: 0)
    assert cpu.device == "cpu" and cpu.devices_per_node >= 1
    gpu = resolve_cluster(ClusterConfig(), gpus=lambda: 4)
    assert (gpu.device, gpu.devices_per_node) == ("cuda", 4)
    forced = resolve_cluster(ClusterConfig(device="cpu", devices_per_node=3), gpus=lambda: 4)
    assert (forced.device, forced.devices_per_node) == ("cpu", 3)
    remote = resolve_cluster(ClusterConfig(device="cuda", devices_per_node=8), gpus=lambda: 0)
    assert (remote.device, remote.devices_per_node) == ("cuda", 8)
    with pytest.raises(PlacementError, match=r"^cluster\.device: cuda, but no GPU is visible"):
        resolve_cluster(ClusterConfig(device="cuda"), gpus=lambda: 0)


@pytest.mark.parametrize(
    ("cluster", "configs"),
    [
        ("local", ["embodied/cartpole_ppo", "reasoning/tiny_arith_ppo"]),
        ("gpu_1x8", ["embodied/cartpole_ppo", "reasoning/tiny_arith_ppo"]),
        ("gpu_2x8", ["embodied/cartpole_ppo", "reasoning/tiny_arith_ppo"]),
        ("gpu_2x8_disaggregated", ["reasoning/tiny_arith_ppo"]),
    ],
)
def test_shipped_cluster_layouts_plan(cluster, configs):
    from rlcore.config import load_config
    from rlcore.placement import plan_for_config

    for name in configs:
        p = plan_for_config(load_config(name, [f"cluster={cluster}"]), gpus=lambda: 0)
        assert p.num_nodes * p.devices_per_node >= 1
        assert set(p.components) >= {"actor", "rollout"}


@pytest.mark.parametrize(
    ("overrides", "deadline"),
    [
        ([], None),  # envs in the driver's process: Ctrl-C reaches them
        (["env.vector_mode=async"], 300.0),  # subprocesses
        (
            ["cluster.devices_per_node=2", "cluster.component_placement={env:0,actor:1,rollout:1}"],
            300.0,
        ),  # a Ray worker
        (["env.vector_mode=async", "env.step_timeout_s=7"], 7.0),  # the user's own limit
    ],
)
def test_envs_out_of_the_drivers_reach_step_under_a_deadline(overrides, deadline):
    from rlcore.config import load_config
    from rlcore.placement import plan_for_config, runs_in_driver
    from rlcore.workers.embodied.env_worker import step_deadline

    config = load_config("embodied/cartpole_ppo", ["cluster.device=cpu", *overrides])
    plan = plan_for_config(config, gpus=lambda: 0)
    assert step_deadline(config.env, runs_in_driver(plan, config.cluster.address)) == deadline
    assert config.env.step_timeout_s == (7.0 if deadline == 7.0 else None)  # the key, as given
