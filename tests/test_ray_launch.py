"""tests/ray_launch.py's forked Ray workers start as Ray's own do: on this worker's local Ray, a
worker that the launch process forks and one that Ray starts itself (a variable that torch reads
on import, set in its runtime environment, sends it Ray's way) see the same start: arguments,
import path, main module, working folder, the environment that Ray and the runtime environment
give, torch's threads, signal dispositions and multiprocessing's state."""

import os
import signal
import sys

import pytest

from tests.ray_launch import _own_folder, launcher_pid

pytestmark = [
    pytest.mark.usefixtures("local_ray"),
    pytest.mark.skipif(
        bool(os.environ.get("RLCORE_TESTS_RAY_FRESH")),
        reason="RLCORE_TESTS_RAY_FRESH=1: no worker is forked",
    ),
]

MARK = {"LAUNCH_MARK": "set"}  # given to both through their runtime environments
REAL = {"TORCH_LAUNCH_PROBE": "1"}  # read-on-import prefix: tests/forked.py's rule refuses it


def disposition(handler) -> str:
    if handler in (signal.SIG_DFL, signal.SIG_IGN, signal.default_int_handler, None):
        return str(handler)
    return "a Python handler"


class Sees:
    def start(self) -> dict:
        import multiprocessing

        import torch

        main = sys.modules["__main__"]
        ray_env = {k: v for k, v in os.environ.items() if k.startswith("RAY_") or k in MARK}
        sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE, signal.SIGCHLD, signal.SIGHUP)
        return {
            "parent": os.getppid(),
            "sees": {
                "argv": os.path.basename(sys.argv[0]),
                "path": sys.path,
                "main": os.path.basename(getattr(main, "__file__", "") or ""),
                "cwd": os.getcwd(),
                "env": ray_env,
                "omp": os.environ.get("OMP_NUM_THREADS"),
                "threads": torch.get_num_threads(),
                "signals": [disposition(signal.getsignal(s)) for s in sigs],
                "mp": (
                    multiprocessing.current_process().name,
                    multiprocessing.parent_process() is None,
                ),
            },
        }


@pytest.mark.parametrize("threads", [None, "2"], ids=["threads-as-ray-sets", "threads-as-asked"])
def test_a_forked_worker_starts_as_one_that_ray_starts(threads):
    import ray

    extra = {} if threads is None else {"OMP_NUM_THREADS": threads}
    seen = {}
    for way, env in (("forked", {**MARK, **extra}), ("real", {**MARK, **REAL, **extra})):
        actor = ray.remote(num_cpus=0)(Sees).options(runtime_env={"env_vars": env}).remote()
        try:
            seen[way] = ray.get(actor.start.remote(), timeout=120)
        finally:
            ray.kill(actor)
    launcher = launcher_pid()  # the forked one's parent; Ray's own, a raylet's process
    assert seen["forked"]["parent"] == launcher and seen["real"]["parent"] != launcher
    assert seen["forked"]["sees"] == seen["real"]["sees"]
    # a new process's torch: as many threads as the variable says (Ray sets 1 where none is)
    assert seen["forked"]["sees"]["threads"] == int(threads or 1)


def test_the_launch_socket_goes_only_into_a_folder_of_this_users_alone(tmp_path):
    """Its folder's name in the shared temporary folder is predictable (the pytest worker's
    pid): one that others may write to, or a link planted under that name, takes no socket."""
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    assert _own_folder(str(mine))
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    assert not _own_folder(str(shared))
    link = tmp_path / "link"
    link.symlink_to(mine)
    assert not _own_folder(str(link))
    assert not _own_folder(str(tmp_path / "missing"))
