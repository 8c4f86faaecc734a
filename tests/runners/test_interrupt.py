"""Ctrl-C, SIGTERM or SIGHUP stops a run after its current iteration with a checkpoint and a summary
marked interrupted, exits non-zero within seconds, and leaves no process behind (subprocess
envs included)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlcore.scheduler.processes import alive, children

REPO = Path(__file__).resolve().parents[2]


SENT = {"sigterm": signal.SIGTERM, "sighup": signal.SIGHUP}  # to the driver alone


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm", "sighup"])
def test_a_signal_stops_after_the_iteration_with_a_checkpoint_and_a_summary(tmp_path, how):
    run = subprocess.Popen(
        [
            sys.executable,
            "examples/embodied/main.py",
            "env.vector_mode=async",
            "env.num_envs=4",
            "runner.rollout_steps=32",
            "actor.ppo_mini_batch_size=128",
            "runner.progress=false",
            "logger.console=true",
            "logger.tensorboard=false",
            "runner.checkpoint_every=100000",
            "env.solved_threshold=null",
            f"runner.output_dir={tmp_path}",
            "runner.run_name=r",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a process group of its own, as a terminal's job is
    )
    try:
        for line in run.stderr:  # wait for two iterations
            if line.startswith("step 256:"):
                break
        envs = children(run.pid, recursive=True)
        assert len(envs) >= 4  # the async envs' subprocesses
        start = time.monotonic()
        if how == "ctrl-c":  # the terminal sends SIGINT to the whole group
            os.killpg(run.pid, signal.SIGINT)
        else:
            run.send_signal(SENT[how])
        _, err = run.communicate(timeout=60)
        assert time.monotonic() - start < 30
        expected = 128 + (signal.SIGINT if how == "ctrl-c" else SENT[how])
        assert run.returncode == expected, err[-2000:]
        assert "stopping after this iteration" in err and "Traceback" not in err
        summary = json.loads((tmp_path / "r" / "summary.json").read_text())
        assert summary["interrupted"] is True
        done = summary["iterations"]
        assert done >= 2
        saved = sorted(p.name for p in (tmp_path / "r" / "checkpoints").iterdir())
        assert saved == [f"iter_{done:06d}"]
        deadline = time.monotonic() + 10
        while any(alive(p) for p in envs) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [p for p in envs if alive(p)]
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
