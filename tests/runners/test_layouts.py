"""Every embodied layout trains CartPole to the solved threshold through the entry point, and
what the dry run accepts the run accepts (and what it refuses, the run refuses)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TWO_SLOTS = "cluster.devices_per_node=2"
LAYOUTS = {
    "one-process": "{env:0,rollout:0,actor:0}",  # the default: everything in the driver
    "env-apart": "{env:0,rollout:1,actor:1}",
    "rollout-apart": "{env:0,rollout:0,actor:1}",  # RLinf's canonical embodied split
    "data-parallel": "{env:all,rollout:all,actor:all}",  # 2 ranks of each, fused in pairs
}
PROCESSES = {"one-process": 1, "env-apart": 2, "rollout-apart": 2, "data-parallel": 2}


def main(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "examples/embodied/main.py", "runner.progress=false", *args],
        cwd=REPO, capture_output=True, text=True, check=False, timeout=timeout,
    )  # fmt: skip


@pytest.mark.parametrize("layout", LAYOUTS)
def test_each_layout_solves_cartpole_and_the_dry_run_accepts_it(tmp_path, layout):
    placement = (TWO_SLOTS, f"cluster.component_placement={LAYOUTS[layout]}")
    dry = main(*placement, "runner.dry_run=true")
    assert dry.returncode == 0, dry.stderr
    assert "dry run: the config and placement are valid" in dry.stdout
    done = main(*placement, f"runner.output_dir={tmp_path}")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["eval_return_mean"] >= 475, summary
    assert summary["steps_to_threshold"] is not None
    assert summary["actor_ranks"] == (2 if layout == "data-parallel" else 1)
    run_dir = Path(summary["run_dir"])
    saved = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert saved[-1] == f"iter_{summary['iterations']:06d}"  # the stop at the threshold is saved


@pytest.mark.parametrize(
    ("placement", "message"),
    [
        ("{env:all,rollout:0,actor:0}", "env has 2 rank(s) and rollout 1"),
        ("{env:0,rollout:0,actor:all}", "env.num_envs: 63 envs cannot be shared by 2 actor"),
    ],
)  # fmt: skip
def test_a_layout_the_dry_run_refuses_the_run_refuses_the_same_way(tmp_path, placement, message):
    args = (TWO_SLOTS, f"cluster.component_placement={placement}", f"runner.output_dir={tmp_path}",
            "env.num_envs=63", "actor.ppo_mini_batch_size=504")  # 63 envs x 8 steps  # fmt: skip
    for dry_run in ("true", "false"):
        done = main(*args, f"runner.dry_run={dry_run}")
        assert done.returncode == 2, (dry_run, done.stderr)
        assert message in done.stderr, (dry_run, done.stderr)
    assert not any(tmp_path.iterdir())  # refused before anything started or was written
