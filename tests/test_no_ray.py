"""A one-process plan needs no Ray: the default jobs run with ``import ray`` failing, as on a
machine without Ray installed."""

import json
import subprocess
import sys
from pathlib import Path

from tests.lm_fixtures import TINY, once

REPO = Path(__file__).resolve().parents[1]

# Every job of this file in one interpreter (importing torch and rlcore is most of a small job's
# cost: 2.5 CPU-s an interpreter here), each job's exit code and last stdout line after it.
BLOCKED = (
    "import json, sys; sys.modules['ray'] = None  # `import ray` raises ImportError\n"
    "from rlcore.cli import run_entry_point\n"
    "for config, args in {jobs!r}:\n"
    "    print('JOB', config, file=sys.stderr, flush=True)\n"
    "    try:\n"
    "        code = run_entry_point(config, args)\n"
    "    except SystemExit as stop:  # (a config error ends the entry point so)\n"
    "        code = stop.code\n"
    "    print('EXIT', code, flush=True)\n"
    "assert sys.modules['ray'] is None\n"
)


def test_the_default_jobs_run_without_ray_and_a_plan_of_several_processes_says_it_needs_it(
    tiny_lm, tmp_path
):
    _, dirs = tiny_lm
    common = ["runner.progress=false", f"runner.output_dir={tmp_path}", "logger.tensorboard=false"]
    several = [
        "cluster.devices_per_node=2",
        "cluster.component_placement={env:0,rollout:1,actor:1}",
    ]
    jobs = [
        ("embodied/cartpole_ppo", ["runner.total_env_steps=2048", *common]),
        ("reasoning/tiny_arith_ppo", once(*TINY, f"warmup.cache_dir={dirs.actor.parent}", *common)),
        ("embodied/cartpole_ppo", [*several, *common]),
    ]
    script = BLOCKED.format(jobs=jobs)
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    exits = [i for i, line in enumerate(lines) if line.startswith("EXIT")]
    assert [lines[i] for i in exits] == ["EXIT 0", "EXIT 0", "EXIT 2"], done.stderr[-2000:]
    for i in exits[:2]:  # a run's summary is its last line before the exit
        assert json.loads(lines[i - 1])["iterations"] >= 1
    refused = done.stderr.split("JOB embodied/cartpole_ppo")[-1]
    assert "this plan runs 2 processes, which needs Ray (pip install ray)" in refused
