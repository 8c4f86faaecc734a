"""rlcore.procpool's processes start as spawned ones would see the world (the caller's
environment, working folder and ``sys.path`` of the moment), from a fork server that imported
the program's main module once, not once per process."""

import os
import sys

from rlcore.procpool import DeadlinePool, serve_items


def serve(conn, payload):
    serve_items(conn, lambda: None, lambda state, index, item: see(*item))


def see(name):
    return os.environ.get(name), os.getcwd(), sys.path[:1], os.getpid()


def test_a_process_sees_the_callers_environment_and_folder_of_the_moment(tmp_path, monkeypatch):
    first = DeadlinePool(serve, None, processes=1, timeout_s=30)  # (the server runs by now)
    try:
        assert first.run([("RLCORE_PROCPOOL_PROBE",)])[0].result[0] is None
    finally:
        first.close()
    monkeypatch.setenv("RLCORE_PROCPOOL_PROBE", "set later")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    pool = DeadlinePool(serve, None, processes=1, timeout_s=30)
    try:
        before = pool.run([("RLCORE_PROCPOOL_PROBE",)])[0].result
        pool._replace(0)  # (a process killed at a deadline: its replacement sees the same)
        after = pool.run([("RLCORE_PROCPOOL_PROBE",)])[0].result
    finally:
        pool.close()
    assert before[:3] == after[:3] == ("set later", str(tmp_path), [str(tmp_path)])
    assert before[3] != after[3]


MAIN = """
import os, sys
with open(sys.argv[1], "a") as f:  # (before this module's imports: what this process had)
    f.write(f"{os.getpid()} {'torch' in sys.modules}\\n")
import torch  # (an entry point's imports)
from rlcore.procpool import DeadlinePool
from tests.test_procpool import serve

if __name__ == "__main__":
    pool = DeadlinePool(serve, None, processes=1, timeout_s=30)
    pids = set()
    for _ in range(3):  # (each process killed after its item, as at a deadline)
        pids.add(pool.run([("X",)])[0].result[3])
        pool._replace(0)
    pool.close()
    print(" ".join(map(str, sorted(pids))))
"""


def test_a_process_starts_with_the_main_modules_imports_done(tmp_path):
    """Each process runs the program's main module again (as a spawned one does), but with
    what it imports already imported by the fork server: torch is there before the main
    module's first line in each process that served, where a spawned one imports it anew."""
    from tests import forked

    script, marks = tmp_path / "main.py", tmp_path / "marks"
    script.write_text(MAIN)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**forked.server_environment(), "PYTHONPATH": root}
    done = forked.run(
        [sys.executable, str(script), str(marks)], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    served = done.stdout.split()
    assert len(served) == 3  # three processes, each killed after its item
    had_torch = dict(line.split() for line in marks.read_text().splitlines())
    assert all(had_torch[pid] == "True" for pid in served), had_torch
