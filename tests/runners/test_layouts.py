"""Every embodied layout trains CartPole to the solved threshold through the entry point, and
what the dry run accepts the run accepts (and what it refuses, the run refuses).

The entry point runs in this process, its layouts on this pytest worker's Ray (one start for
the module's runs); a driver process of its own starting its own local Ray, and leaving nothing
behind, is tested in tests/scheduler/test_ray_lifecycle.py."""

import contextlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rlcore.cli import run_entry_point
from rlcore.config import load_config
from rlcore.placement import plan_for_config
from rlcore.runners.embodied import EmbodiedRunner

pytestmark = pytest.mark.usefixtures("local_ray")

TWO_SLOTS = "cluster.devices_per_node=2"
LAYOUTS = {
    "one-process": "{env:0,rollout:0,actor:0}",  # the default: everything in the driver
    "env-apart": "{env:0,rollout:1,actor:1}",
    "rollout-apart": "{env:0,rollout:0,actor:1}",  # RLinf's canonical embodied split
    "data-parallel": "{env:all,rollout:all,actor:all}",  # 2 ranks of each, fused in pairs
}
PROCESSES = {"one-process": 1, "env-apart": 2, "rollout-apart": 2, "data-parallel": 2}


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str


def main(*args: str) -> Done:
    """``examples/embodied/main.py ARGS`` (its ``run_entry_point``) in this process, on this
    worker's Ray: what it returns or exits with, and what it printed."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = run_entry_point("embodied/cartpole_ppo", ["runner.progress=false", *args])
        except SystemExit as exit:
            code = exit.code
    return Done(code, out.getvalue(), err.getvalue())


def run_through_entry_point(tmp_path, layout, *extra):
    placement = (TWO_SLOTS, f"cluster.component_placement={LAYOUTS[layout]}")
    dry = main(*placement, "runner.dry_run=true", *extra)
    assert dry.returncode == 0, dry.stderr
    assert "dry run: the config and placement are valid" in dry.stdout
    done = main(*placement, f"runner.output_dir={tmp_path}", *extra)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["actor_ranks"] == (2 if layout == "data-parallel" else 1)
    assert summary["restarts"] == 0
    return summary


def final_actor(summary):
    checkpoint = f"checkpoints/iter_{summary['iterations']:06d}/actor/model.safetensors"
    return load_file(Path(summary["run_dir"]) / checkpoint)


@pytest.mark.parametrize("layout", ["one-process", "data-parallel"])
def test_a_layout_solves_cartpole_and_the_dry_run_accepts_it(tmp_path, layout):
    summary = run_through_entry_point(tmp_path, layout)
    assert summary["eval_return_mean"] >= 475, summary
    assert summary["steps_to_threshold"] is not None
    run_dir = Path(summary["run_dir"])
    saved = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert saved[-1] == f"iter_{summary['iterations']:06d}"  # the stop at the threshold is saved


SHORT = ("runner.total_env_steps=5120",)  # 10 iterations, one evaluation


@pytest.mark.parametrize("layout", ["env-apart", "rollout-apart"])
def test_the_split_layouts_compute_what_one_process_computes(tmp_path, layout):
    """The env or the actor in a process of its own changes where the numbers are computed,
    not the numbers: 10 iterations end with the weights of the one-process run, bit for bit
    (so these layouts solve CartPole when the one-process layout does)."""
    split = run_through_entry_point(tmp_path / "split", layout, *SHORT)
    config = load_config(
        "embodied/cartpole_ppo", [*SHORT, f"runner.output_dir={tmp_path}", "runner.progress=false"]
    )
    alone = EmbodiedRunner(config, plan_for_config(config)).run()
    assert split["eval_return_mean"] == alone["eval_return_mean"]
    a, b = final_actor(split), final_actor(alone)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(
    ("placement", "message"),
    [
        ("{env:all,rollout:0,actor:0}", "env has 2 rank(s) and rollout 1"),
        ("{env:0,rollout:0,actor:all}", "env.num_envs: 63 envs cannot be shared by 2 actor"),
    ],
)
def test_a_layout_the_dry_run_refuses_the_run_refuses_the_same_way(tmp_path, placement, message):
    args = (
        TWO_SLOTS,
        f"cluster.component_placement={placement}",
        f"runner.output_dir={tmp_path}",
        "env.num_envs=63",
        "actor.ppo_mini_batch_size=504",
    )  # 63 envs x 8 steps
    for dry_run in ("true", "false"):
        done = main(*args, f"runner.dry_run={dry_run}")
        assert done.returncode == 2, (dry_run, done.stderr)
        assert message in done.stderr, (dry_run, done.stderr)
    assert not any(tmp_path.iterdir())  # refused before anything started or was written
