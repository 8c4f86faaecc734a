"""``cluster.component_placement: auto``: the advisor's pick from the config's kept profile, the
same in a dry run and in the run, run end to end in both modes with the prediction beside the
measured seconds, and a profile of another config measured anew.

The profiles here are written by hand (``kept``), so that which layout is best is known without
measuring: calls between processes cost a second each, so the one-process layout wins, and a
run of it needs no Ray."""

import json

import pytest

from rlcore.cli import main
from rlcore.config import load_config
from rlcore.placement import PlacementError, plan_for_config
from rlcore.placement.cost import Link, Profile, Work
from rlcore.runners import profiling
from tests.lm_fixtures import TINY, once

SLOW = Link(latency_s=1.0, bytes_per_s=1.0)  # a call between processes: a second and more

EMBODIED = Profile(
    "embodied",
    1,
    {"collect": 0.01, "update": 0.02},
    {
        "collect": {"rollout": Work(0.005, 1), "env": Work(0.005, 10, caller="rollout")},
        "update": {"actor": Work(0.02, 1)},
    },
    SLOW,
)
REASONING = Profile(
    "reasoning",
    1,
    {"generate": 0.1, "reward": 0.01, "values": 0.05, "critic_update": 0.1, "actor_update": 0.1},
    {
        "generate": {"rollout": Work(0.1, 1)},
        "reward": {"reward": Work(0.01, 1)},
        "values": {"critic": Work(0.05, 1)},
        "critic_update": {"critic": Work(0.1, 1)},
        "actor_update": {"actor": Work(0.1, 1)},
    },
    SLOW,
)


def kept(config, profile):
    path = profiling.profile_path(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(profiling.to_json({1: profile}, config)))


def test_a_plan_asked_for_without_the_entry_points_is_refused_naming_them():
    config = load_config("embodied/cartpole_ppo", ["cluster.component_placement=auto"])
    with pytest.raises(PlacementError, match="auto is chosen by the entry points"):
        plan_for_config(config)


def test_auto_keeps_the_users_staleness():
    # with runner.max_staleness=1 the one-process layout is not a candidate: the pick is the
    # fastest layout with the rollout apart, however slow the calls
    config = load_config(
        "embodied/cartpole_ppo",
        [
            "cluster.devices_per_node=2",
            "runner.max_staleness=1",
            "cluster.component_placement=auto",
        ],
    )
    kept(config, EMBODIED)
    chosen, best = profiling.choose_placement(config)
    assert best.candidate.max_staleness == 1 and chosen.runner.max_staleness == 1
    assert chosen.cluster.component_placement == best.candidate.placement()
    plan_for_config(chosen)  # a placement the run takes


def _auto_run_and_dry_run(mode, config_name, common, profile, capsys):
    config = load_config(config_name, common)
    kept(config, profile)
    argv = [mode, "--config", config_name, *common]
    assert main([*argv, "runner.dry_run=true"]) == 0
    dry = capsys.readouterr()
    picked = [line for line in dry.err.splitlines() if "auto picked" in line]
    assert len(picked) == 1 and "auto picked {" in picked[0]
    assert main(argv) == 0
    ran = capsys.readouterr()
    assert [line for line in ran.err.splitlines() if "auto picked" in line] == picked
    summary = json.loads(ran.out.strip().splitlines()[-1])
    prediction = summary["placement_prediction"]
    # one process: the prediction is the profile's iteration
    expected = sum(profile.stages.values())
    assert prediction["predicted_iteration_s"] == pytest.approx(expected, abs=1e-5)
    assert prediction["measured_iteration_s"] > 0
    said = [line for line in ran.err.splitlines() if "placement: predicted" in line]
    assert len(said) == 1 and "median of 3 iterations" in said[0]
    return summary


def test_auto_runs_embodied_end_to_end_and_the_dry_run_picks_the_same(tmp_path, capsys):
    common = [
        "cluster.component_placement=auto",
        "cluster.devices_per_node=2",
        f"runner.output_dir={tmp_path}",
        "runner.total_env_steps=6144",  # 6 iterations of 1024 steps
        "runner.progress=false",
        "runner.checkpoint_every=0",
    ]
    _auto_run_and_dry_run("embodied", "embodied/cartpole_ppo", common, EMBODIED, capsys)


def test_auto_runs_reasoning_end_to_end(tiny_lm, tmp_path, capsys):
    _, dirs = tiny_lm
    common = [
        *TINY,
        f"warmup.cache_dir={dirs.actor.parent}",
        "cluster.component_placement=auto",
        "cluster.devices_per_node=2",
        f"runner.output_dir={tmp_path}",
        "runner.total_iterations=6",
    ]
    common = once(*common)
    _auto_run_and_dry_run("reasoning", "reasoning/tiny_arith_ppo", common, REASONING, capsys)


def test_a_profile_of_another_config_is_measured_anew(tmp_path, capsys):
    config = load_config("embodied/cartpole_ppo", [f"runner.output_dir={tmp_path}"])
    other = load_config(
        "embodied/cartpole_ppo", [f"runner.output_dir={tmp_path}", "algorithm.gamma=0.9"]
    )
    kept(other, EMBODIED)
    stale = profiling.profile_path(other)
    assert profiling.load_profile(stale, config) is None
    line = capsys.readouterr().err.strip()
    assert "measured for another config or machine" in line and "measuring anew" in line
    assert len(line.splitlines()) == 1
