"""Ray start-up and shutdown as a user meets them: Ctrl-C, SIGTERM, joining a cluster."""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

from rlcore.scheduler.processes import alive, children, command_lines, listening
from tests import forked

REPO = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).parent / "ray")

DRIVER = textwrap.dedent(
    """
    import signal, sys, time
    # Ctrl-C as at a terminal, even when the test runner was started with SIGINT ignored (a
    # background job), which its children would inherit.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from rlcore.config import load_config
    from rlcore.scheduler import Scheduler

    address = "null" if sys.argv[1] == "local" else sys.argv[1]
    placement, groups = sys.argv[3], sys.argv[4] == "groups"
    config = load_config("embodied/cartpole_ppo", [
        f"cluster.address={address}", "cluster.device=cpu", "cluster.devices_per_node=2",
        f"cluster.component_placement={placement}",
    ])
    with Scheduler.from_config(config, init_distributed=groups) as scheduler:
        import ray
        print("READY", ray.get_runtime_context().gcs_address, flush=True)
        if sys.argv[2] == "wait":
            time.sleep(600)
    print("DONE", flush=True)
    """
)


# Two ranks of one fused group: a TCP store and gloo pairs besides Ray's servers.
TWO_RANKS = ("{env:0-1,actor:0-1,rollout:0-1}", "groups")
# One process and no torch.distributed group (its worker then never imports torch): what a
# driver needs where the claim is about Ray alone (about 4 CPU-s less than TWO_RANKS).
ONE_PROCESS = ("{env:0,actor:0,rollout:0}", "no-groups")


def start_driver(tmp_path: Path, address: str, mode: str, ranks: tuple[str, str]) -> forked.Popen:
    script = tmp_path / "driver.py"
    if not script.exists():  # (rewriting it could empty it under a driver still reading it)
        script.write_text(DRIVER)
    return forked.Popen(
        [sys.executable, str(script), address, mode, *ranks],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def wait_ready(driver: forked.Popen) -> str:
    """The driver's READY line; its later output is drained in the background, so that a full
    pipe (Ray forwards worker logs to the driver's stdout) never blocks it."""
    for line in driver.stdout:
        if line.startswith("READY"):
            threading.Thread(target=driver.stdout.read, daemon=True).start()
            return line
    raise AssertionError(f"the driver exited before starting its workers (rc {driver.wait()})")


def test_interrupted_drivers_leave_no_process_behind(tmp_path):
    """Ctrl-C, SIGTERM and SIGKILL, each sent to a driver of its own running a local Ray; the
    three start side by side (a Ray start is mostly waiting: about half the time of three in a
    row here). The drivers that unwind (Ctrl-C, SIGTERM) run two ranks of a gloo group, whose
    store and pairs their shutdown must end too; a SIGKILLed driver runs no code of its own, its
    Ray stops its processes, so one process without a group makes its claim."""
    ranks = {signal.SIGINT: TWO_RANKS, signal.SIGTERM: TWO_RANKS, signal.SIGKILL: ONE_PROCESS}
    drivers = {sig: start_driver(tmp_path, "local", "wait", ranks[sig]) for sig in ranks}
    try:
        spawned = {}
        for sig, driver in drivers.items():
            wait_ready(driver)
            spawned[sig] = set(children(driver.pid, recursive=True))
            sockets = listening(spawned[sig] | {driver.pid})
            if ranks[sig] == TWO_RANKS:
                assert len(spawned[sig]) >= 4  # Ray's gcs and raylet, two workers, helpers
                assert len(sockets) >= 6, sockets  # gcs, raylet, workers' gRPC, store, gloo
            else:
                assert len(spawned[sig]) >= 3  # Ray's gcs and raylet, the worker, helpers
                assert len(sockets) >= 3, sockets  # gcs, raylet, the worker's gRPC
            exposed = [s for s in sockets if not s.loopback]
            assert not exposed, f"listening beyond loopback: {exposed}"
        for sig, driver in drivers.items():
            driver.send_signal(sig)
        for driver in drivers.values():
            driver.wait(timeout=60)
        # Ray's agents outlive a SIGKILLed driver by 60 s unless its watcher stops them.
        deadline = time.monotonic() + 20
        everyone = set().union(*spawned.values())
        while any(alive(p) for p in everyone) and time.monotonic() < deadline:
            time.sleep(0.25)
        for sig in ranks:
            left = [p for p in spawned[sig] if alive(p)]
            assert not left, f"still running after {sig.name}: {left}"
    finally:
        for driver in drivers.values():
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_joins_a_cluster_started_with_ray_start(tmp_path):
    port = str(free_port())
    start = [
        RAY,
        "start",
        "--head",
        "--node-ip-address=127.0.0.1",
        f"--port={port}",
        "--num-cpus=2",
        "--include-dashboard=false",
        "--disable-usage-stats",
    ]
    subprocess.run(start, check=True, capture_output=True, timeout=120)
    try:
        # (joining is Ray's alone: one process, no torch.distributed group)
        driver = start_driver(tmp_path, "auto", "exit", ONE_PROCESS)
        out = driver.communicate(timeout=120)[0]
        assert driver.returncode == 0, out
        # Ray swaps a loopback node address for the host's own interface address (on purpose,
        # ray-project/ray#26293), so the job is known to have joined ours by the GCS port.
        ready = next(line for line in out.splitlines() if line.startswith("READY"))
        assert ready.endswith(f":{port}") and "DONE" in out
        # the job left the cluster running: it did not start it, so it does not stop it
        assert any(f"--gcs_server_port={port}" in cmd for cmd in command_lines().values())
    finally:
        stop_cluster(port)


def stop_cluster(port: str) -> None:
    """Stop the Ray cluster this test started, by its own processes (those that name its GCS
    port), never `ray stop`, which would stop every Ray on the machine."""
    marks = (f"--gcs_server_port={port}", f"127.0.0.1:{port}", f":{port} ")
    named = [pid for pid, cmd in command_lines().items() if any(m in cmd for m in marks)]
    # with their children (the dashboard and runtime-env agents rename themselves, ray::...)
    mine = set(named).union(*(children(pid, recursive=True) for pid in named))
    # (Ray's runtime-env agent outlives a SIGTERM by 10 s and more: 2 s, then SIGKILL)
    for sig, wait_s in ((signal.SIGTERM, 2), (signal.SIGKILL, 10)):
        for pid in mine:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while any(alive(pid) for pid in mine) and time.monotonic() < deadline:
            time.sleep(0.2)
    # `ray start` names its cluster in this file, where a later `ray.init()` without an address
    # would try to join it (as `ray stop` does, remove it: only when it names ours)
    current = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"
    with contextlib.suppress(OSError):
        if current.read_text().strip().endswith(f":{port}"):
            current.unlink()
