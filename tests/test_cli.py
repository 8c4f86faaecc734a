"""The `rlcore` command and the example entry points, as a user runs them."""

import json
import re
import sys
from pathlib import Path

import pytest

from rlcore.cli import main
from rlcore.config import load_config
from tests import forked

REPO = Path(__file__).resolve().parents[1]


def test_config_prints_the_validated_config_as_json(capsys):
    assert main(["config", "embodied/cartpole_ppo", "algorithm.gamma=0.9", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["algorithm"]["gamma"] == 0.9
    assert out["algorithm"]["kl_ctrl"]["type"] == "fixed"  # defaults are filled in


def test_config_prints_yaml_by_default(capsys):
    assert main(["config", "reasoning/tiny_arith_ppo"]) == 0
    assert "train_batch_size: 128" in capsys.readouterr().out


def test_bad_config_exits_2_with_one_line_per_problem_and_no_traceback(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["config", "embodied/cartpole_ppo", "algorithm.clip_ratio_hi=0.3"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err == (
        "rlcore: config error: algorithm.clip_ratio_hi: unknown key; "
        "did you mean 'algorithm.clip_ratio_high'?\n"
    )


def test_keys_prints_every_key(capsys):
    assert main(["keys"]) == 0
    out = capsys.readouterr().out
    assert (
        "`algorithm.clip_ratio_c`" in out and "`env.id`" in out and "`data.train_batch_size`" in out
    )


def run(*args):
    return forked.run(
        [sys.executable, *args], cwd=REPO, capture_output=True, text=True, check=False
    )


def test_the_reasoning_default_job_is_one_cpu_process():
    done = run("examples/reasoning/main.py", "runner.dry_run=true")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("placement: collocated, 1 node(s) x ")
    assert "one process per rank for: actor, critic, rollout, reward" in done.stdout
    assert "actor         0    0  0            1" in done.stdout  # a single rank, on slot 0


def test_a_cluster_file_that_places_components_replaces_the_configs_placement():
    config = load_config("reasoning/tiny_arith_ppo", ["cluster=gpu_2x8_disaggregated"])
    assert "actor,critic,ref,rollout,reward" not in config.cluster.component_placement


def test_dry_run_prints_the_plan_and_starts_nothing():
    done = run("examples/reasoning/main.py", "runner.dry_run=true", "cluster=gpu_2x8_disaggregated")
    assert done.returncode == 0, done.stderr
    assert "placement: disaggregated, 2 node(s) x 8 GPU(s)" in done.stdout
    assert "rollout       3    1  3            1" in done.stdout  # one GPU per engine
    assert done.stdout.splitlines()[-1].startswith("rlcore: dry run:")


def test_entry_point_with_a_bad_key_exits_2_before_doing_anything():
    done = run("examples/embodied/main.py", "env.num_env=4")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip() == (
        "rlcore: config error: env.num_env: unknown key; did you mean 'env.num_envs'?"
    )


def test_placement_json_is_one_object_in_the_documented_shape(capsys):
    assert (
        main(["placement", "reasoning/tiny_arith_ppo", "cluster=gpu_2x8_disaggregated", "--json"])
        == 0
    )
    out, err = capsys.readouterr()
    plan = json.loads(out)
    assert set(plan) == {"mode", "num_nodes", "devices_per_node", "components"}
    assert (plan["mode"], plan["num_nodes"], plan["devices_per_node"]) == ("disaggregated", 2, 8)
    assert plan["components"]["rollout"][1] == {"rank": 1, "node": 1, "devices": [1]}
    assert list(plan["components"]) == ["actor", "critic", "rollout", "reward"]
    assert "not started: ref" in err


def test_invalid_placement_exits_2_with_one_line(capsys):
    with pytest.raises(SystemExit) as exited:
        main(
            [
                "placement",
                "embodied/cartpole_ppo",
                "cluster.devices_per_node=4",
                "cluster.component_placement={actor:0-4,rollout:0-3,env:0-3}",
            ]
        )
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        "rlcore: config error: cluster.component_placement.actor: '0-4' is out of range: "
        "the cluster has 4 devices (ranks 0-3)\n"
    )


@pytest.mark.parametrize("wrapped", [False, True])
def test_cluster_file_replaces_the_cluster_section(tmp_path, capsys, wrapped):
    body = (
        "num_nodes: 1\n"
        "devices_per_node: 3\n"
        "device: cpu\n"
        "component_placement:\n"
        '  "env": "0-1"\n'
        '  "actor,rollout": "1-2"\n'
    )
    if wrapped:
        body = "cluster:\n" + "".join(f"  {line}\n" for line in body.splitlines())
    path = tmp_path / "mine.yaml"
    path.write_text(body)
    assert main(["placement", "embodied/cartpole_ppo", "--cluster", str(path), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["devices_per_node"] == 3
    assert plan["components"]["env"] == [
        {"rank": 0, "node": 0, "devices": [0]},
        {"rank": 1, "node": 0, "devices": [1]},
    ]
    assert [r["devices"] for r in plan["components"]["actor"]] == [[1], [2]]


def test_overrides_apply_after_the_cluster_file(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("num_nodes: 1\ndevices_per_node: 3\ndevice: cpu\n")
    assert (
        main(
            [
                "placement",
                "embodied/cartpole_ppo",
                "--cluster",
                str(path),
                "cluster.devices_per_node=4",
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["devices_per_node"] == 4


def test_bad_cluster_files_are_named(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("num_node: 2\n")
    for cluster, message in [
        (path, "cluster.num_node: unknown key; did you mean 'cluster.num_nodes'?"),
        (tmp_path / "missing.yaml", f"{tmp_path / 'missing.yaml'}: no such cluster file"),
    ]:
        with pytest.raises(SystemExit):
            main(["placement", "embodied/cartpole_ppo", "--cluster", str(cluster)])
        assert capsys.readouterr().err == f"rlcore: config error: {message}\n"


def test_yaml_syntax_errors_are_one_line_naming_the_file_and_place(tmp_path, capsys):
    cluster, config = tmp_path / "cluster.yaml", tmp_path / "run.yaml"
    cluster.write_text("num_nodes: 1\n devices: [\n")
    config.write_text("mode: embodied\nenv:\n  id: [CartPole\n")
    for args, message in [
        (
            ["embodied/cartpole_ppo", "--cluster", str(cluster)],
            f"{cluster}: not valid YAML: mapping values are not allowed here (line 2, column 9)",
        ),
        (
            [str(config)],
            f"{config}: not valid YAML: expected ',' or ']', but got '<stream end>' (line 4, ",
        ),
    ]:
        with pytest.raises(SystemExit) as stopped:
            main(["placement", *args])
        assert stopped.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith(f"rlcore: config error: {message}") and err.count("\n") == 1, err


def test_unknown_cluster_name_suggests_one(capsys):
    with pytest.raises(SystemExit):
        main(["placement", "embodied/cartpole_ppo", "cluster=gpu_1x9"])
    assert "(did you mean 'gpu_1x8'?)" in capsys.readouterr().err


def test_entry_point_takes_a_cluster_file_in_a_dry_run(tmp_path):
    path = tmp_path / "two_slots.yaml"
    path.write_text(
        "cluster:\n  device: cpu\n  devices_per_node: 2\n  component_placement:\n"
        '    env: 0\n    "actor,rollout": 1\n'
    )
    done = run("examples/embodied/main.py", "--cluster", str(path), "runner.dry_run=true")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("placement: disaggregated, 1 node(s) x 2 CPU slot(s)")
    assert "one process per rank for: actor, rollout" in done.stdout


def test_a_key_given_twice_takes_its_last_value_saying_so_and_a_home_path_is_expanded(
    capsys, monkeypatch, tmp_path
):
    # Hydra's rule, which verl's `bash run_x.sh key=value` relies on (the script's `$@` last)
    assert (
        main(["config", "embodied/cartpole_ppo", "runner.seed=1", "runner.seed=2", "--json"]) == 0
    )
    out, err = capsys.readouterr()
    assert json.loads(out)["runner"]["seed"] == 2
    assert err == (
        "rlcore: runner.seed is given 2 times (runner.seed=1, then runner.seed=2): the last, "
        "runner.seed=2, wins (Hydra's rule)\n"
    )
    # "~" quoted past the shell (or written in YAML) is the home folder, not a folder named "~"
    monkeypatch.setenv("HOME", str(tmp_path))
    config = load_config(
        "reasoning/tiny_arith_ppo",
        [
            "runner.output_dir='~/runs'",
            "reward.kind=custom",
            "data.train_files=['~/a.jsonl',b.jsonl]",
            "reward.rules.custom_fn='~/r.py:score'",
        ],
    )
    assert config.runner.output_dir == f"{tmp_path}/runs"
    assert config.data.train_files == (f"{tmp_path}/a.jsonl", "b.jsonl")
    assert config.reward.rules.custom_fn == f"{tmp_path}/r.py:score"


@pytest.mark.parametrize("mode", ["embodied", "reasoning"])
def test_help_lists_the_shipped_configs_and_the_commands_around_a_run(mode, capsys):
    from rlcore.cli import run_entry_point

    default = {"embodied": "embodied/cartpole_ppo", "reasoning": "reasoning/tiny_arith_ppo"}
    with pytest.raises(SystemExit) as done:
        run_entry_point(default[mode], ["--help"])
    assert done.value.code == 0
    shown = capsys.readouterr().out
    files = sorted((REPO / "configs" / mode).glob("*.yaml"))
    assert len(files) >= 4
    for path in files:
        described = next(
            line.removeprefix("# description:").strip()
            for line in path.read_text().splitlines()
            if line.startswith("# description:")
        )
        assert re.search(rf"(?m)^  {mode}/{re.escape(path.stem)} +{re.escape(described)}$", shown)
    for command in ("runner.dry_run=true", "rlcore keys", "rlcore placement NAME"):
        assert command in shown


def test_python_m_rlcore_trains_each_mode_as_its_example_entry_point_does():
    done = run("-m", "rlcore", "embodied", "runner.dry_run=true")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("placement: collocated")
    assert done.stdout.splitlines()[-1].startswith("rlcore: dry run:")
    listed = run("-m", "rlcore", "--help")
    assert listed.returncode == 0 and "{embodied,reasoning,config,placement," in listed.stdout


def test_rlcore_reasoning_runs_the_reasoning_entry_point_with_its_default(capsys):
    with pytest.raises(SystemExit) as done:
        main(["reasoning", "--help"])
    assert done.value.code == 0
    shown = capsys.readouterr().out
    assert shown.startswith("usage: rlcore reasoning ")
    assert "reasoning/tiny_arith_ppo by default" in shown
