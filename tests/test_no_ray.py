"""A one-process plan needs no Ray: the default jobs run with ``import ray`` failing, as on a
machine without Ray installed."""

import json
import subprocess
import sys
from pathlib import Path

from tests.lm_fixtures import TINY, once

REPO = Path(__file__).resolve().parents[1]

BLOCKED = (
    "import sys; sys.modules['ray'] = None  # `import ray` raises ImportError\n"
    "from rlcore.cli import run_entry_point\n"
    "code = run_entry_point({config!r}, {args!r})\n"
    "assert sys.modules['ray'] is None\n"
    "sys.exit(code)\n"
)


def run_without_ray(config, args):
    script = BLOCKED.format(config=config, args=args)
    return subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300
    )


def test_the_default_jobs_run_without_ray(tiny_lm, tmp_path):
    _, dirs = tiny_lm
    common = ["runner.progress=false", f"runner.output_dir={tmp_path}", "logger.tensorboard=false"]
    jobs = {
        "embodied/cartpole_ppo": ["runner.total_env_steps=2048", *common],
        "reasoning/tiny_arith_ppo": once(*TINY, f"warmup.cache_dir={dirs.actor.parent}", *common),
    }
    for config, args in jobs.items():
        done = run_without_ray(config, args)
        assert done.returncode == 0, done.stderr[-2000:]
        summary = json.loads(done.stdout.strip().splitlines()[-1])
        assert summary["iterations"] >= 1


def test_a_plan_of_several_processes_says_it_needs_ray(tmp_path):
    done = run_without_ray(
        "embodied/cartpole_ppo",
        [
            "cluster.devices_per_node=2",
            "cluster.component_placement={env:0,rollout:1,actor:1}",
            "runner.progress=false",
            f"runner.output_dir={tmp_path}",
        ],
    )
    assert done.returncode == 2
    assert "this plan runs 2 processes, which needs Ray (pip install ray)" in done.stderr
