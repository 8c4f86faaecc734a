"""The `rlcore` command and the example entry points, as a user runs them."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlcore.cli import main

REPO = Path(__file__).resolve().parents[1]


def test_config_prints_the_validated_config_as_json(capsys):
    assert main(["config", "embodied/cartpole_ppo", "algorithm.gamma=0.9", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["algorithm"]["gamma"] == 0.9
    assert out["algorithm"]["kl_ctrl"]["type"] == "fixed"  # defaults are filled in


def test_config_prints_yaml_by_default(capsys):
    assert main(["config", "reasoning/tiny_arith_ppo"]) == 0
    assert "train_batch_size: 32" in capsys.readouterr().out


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


@pytest.mark.parametrize(
    ("script", "mode"),
    [("examples/embodied/main.py", "embodied"), ("examples/reasoning/main.py", "reasoning")],
)
def test_entry_points_validate_and_say_no_job_is_built_yet(script, mode):
    done = subprocess.run(
        [sys.executable, script, "algorithm.entropy_bonus=0.02"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "entropy_bonus: 0.02" in done.stdout
    assert f"the {mode} runner is not built" in done.stdout.splitlines()[-1]


def test_entry_point_with_a_bad_key_exits_2_before_doing_anything():
    done = subprocess.run(
        [sys.executable, "examples/embodied/main.py", "env.num_env=4"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip() == (
        "rlcore: config error: env.num_env: unknown key; did you mean 'env.num_envs'?"
    )
