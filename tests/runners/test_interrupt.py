"""Ctrl-C, SIGTERM or SIGHUP stops a run after its current iteration with a checkpoint and a summary
marked interrupted, exits non-zero within seconds, and leaves no process behind (subprocess
envs included)."""

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path

import pytest

from rlcore.runners.loop import StopRequests
from rlcore.scheduler.processes import alive, children
from tests import forked

REPO = Path(__file__).resolve().parents[2]


SENT = {"sigterm": signal.SIGTERM, "sighup": signal.SIGHUP}  # to the driver alone


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm", "sighup"])
def test_a_signal_stops_after_the_iteration_with_a_checkpoint_and_a_summary(tmp_path, how):
    run = forked.Popen(
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


def test_a_stop_request_landing_in_a_write_to_stderr_is_said_after_that_write(monkeypatch):
    """The signal arrives while a long metrics line is being written to a buffered stderr (a
    pipe that is full until its reader catches up): the handler's line must wait for that
    write, not write into the same stream from inside it (a buffered stream refuses that with
    "reentrant call", which ended a run with a traceback instead of a checkpoint)."""
    read, write = os.pipe()
    stream = io.TextIOWrapper(io.BufferedWriter(io.FileIO(write, "w")), line_buffering=True)
    monkeypatch.setattr(sys, "stderr", stream)  # (rlcore's log handler writes to sys.stderr)
    got = []
    reader = threading.Thread(
        target=lambda: got.append(b"".join(iter(partial(os.read, read, 1 << 16), b"")))
    )
    main = threading.main_thread().ident
    long_line = "x" * (1 << 20) + "\n"  # far more than a pipe holds: the write blocks
    with StopRequests() as stop:
        threading.Timer(0.3, signal.pthread_kill, (main, signal.SIGHUP)).start()
        threading.Timer(0.6, reader.start).start()
        stream.write(long_line)  # interrupted by the signal, then finished
        time.sleep(0.2)
    for thread in threading.enumerate():
        if thread.name == "rlcore-stop-request":
            thread.join(timeout=10)
    stream.close()
    reader.join(timeout=10)
    os.close(read)
    text = got[0].decode()
    assert stop.signum == signal.SIGHUP
    assert text.startswith(long_line)  # whole, and first
    assert text[len(long_line) :] == (
        "rlcore: SIGHUP: stopping after this iteration, with a checkpoint and the summary (send "
        "it again to stop at once)\n"
    )
