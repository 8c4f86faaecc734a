"""tests/forked.py's children behave as new interpreters do: each request runs both ways, forked
and as a real process (``subprocess``), and what the code sees and what the caller gets back
(exit status, output, signals, limits, multiprocessing's state) must be the same."""

import os
import resource
import signal
import subprocess
import sys
import time

import pytest

from tests import forked

# what a process sees of its own start (the same in both ways, unlike its pid)
SEES = """
import atexit, multiprocessing, os, signal, sys
atexit.register(lambda: print("atexit", flush=True))
print("argv", sys.argv[1:], "cwd", os.getcwd(), "X", os.environ.get("X"))
print("main", __name__, "path0", repr(sys.path[0]))
print("new session", os.getsid(0) == os.getpid())
print("fsize", resource.getrlimit(resource.RLIMIT_FSIZE)[0] if "resource" in dir() else None)
print("signals", [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE)])
print("mp", multiprocessing.get_start_method(), multiprocessing.current_process().name,
      multiprocessing.parent_process())
print("to stderr", file=sys.stderr)
"""

ENDS = {
    "returns": "",
    "exits 3": "sys.exit(3)",
    "raises": "raise ValueError('boom')",
    "exits with a message": "sys.exit('a message')",
    "is interrupted": "raise KeyboardInterrupt",
}


def both(args, **kwargs):
    return [
        impl.run(args, capture_output=True, text=True, **kwargs) for impl in (forked, subprocess)
    ]


@pytest.mark.parametrize("end", list(ENDS))
def test_code_ends_as_in_a_new_interpreter(end, tmp_path):
    code = "import resource\n" + SEES + ENDS[end]
    env = {**os.environ, "X": "set"}
    mine, real = both([sys.executable, "-c", code, "a", "b"], cwd=tmp_path, env=env)
    assert (mine.returncode, mine.stdout, mine.stderr) == (
        real.returncode,
        real.stdout,
        real.stderr,
    )
    expected = {"returns": 0, "exits 3": 3, "raises": 1, "exits with a message": 1}
    assert real.returncode == expected.get(end, -signal.SIGINT)
    assert "argv ['a', 'b'] cwd " + str(tmp_path) + " X set" in real.stdout
    assert real.stdout.endswith("atexit\n")


def test_a_script_and_a_module_see_their_folders_first_then_pythonpath(tmp_path):
    (tmp_path / "app").mkdir()
    (tmp_path / "lib").mkdir()
    (tmp_path / "app" / "helper.py").write_text("WHERE = 'app'\n")
    (tmp_path / "lib" / "extra.py").write_text("WHERE = 'lib'\n")
    body = (
        "import sys, helper, extra\n"
        "print(__name__, helper.WHERE, extra.WHERE, sys.argv, sys.path[0])\n"
        "print(__file__)\n"
    )
    (tmp_path / "app" / "main.py").write_text(body)
    (tmp_path / "app" / "mod.py").write_text(body)
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "lib")}
    script = both([sys.executable, "app/main.py", "x"], cwd=tmp_path, env=env)
    module = both([sys.executable, "-m", "mod", "y"], cwd=tmp_path / "app", env=env)
    for mine, real in (script, module):
        assert real.returncode == 0, real.stderr
        assert (mine.returncode, mine.stdout, mine.stderr) == (real.returncode, real.stdout, "")


def test_a_signal_a_session_and_a_file_size_limit_as_for_a_real_process(tmp_path):
    code = (
        "import os, resource, time\n"
        "print(os.getsid(0) == os.getpid(), resource.getrlimit(resource.RLIMIT_FSIZE)[0])\n"
        "print('written', os.write(os.open('big', os.O_WRONLY | os.O_CREAT), bytes(5000)))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    limit = {resource.RLIMIT_FSIZE: (1000, resource.RLIM_INFINITY)}

    def limited():
        resource.setrlimit(resource.RLIMIT_FSIZE, limit[resource.RLIMIT_FSIZE])

    outs = []
    for impl, extra in ((forked, {"rlimits": limit}), (subprocess, {"preexec_fn": limited})):
        process = impl.Popen(
            [sys.executable, "-c", code],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            **extra,
        )
        lines = [process.stdout.readline() for _ in range(3)]
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=10)
        outs.append((lines, process.returncode))
    assert outs[0] == outs[1]
    assert outs[1] == (["True 1000\n", "written 1000\n", "ready\n"], -signal.SIGTERM)


def test_multiprocessing_starts_children_as_in_a_main_process(tmp_path):
    code = (
        "import multiprocessing as mp\n"
        "if __name__ == '__main__':\n"
        "    for method in (None, 'spawn'):\n"
        "        p = mp.get_context(method).Process(target=print, args=('child',))\n"
        "        p.start(); p.join(); print(p.exitcode, flush=True)\n"
    )
    (tmp_path / "starts.py").write_text(code)
    mine, real = both([sys.executable, "starts.py"], cwd=tmp_path)
    assert (mine.returncode, mine.stdout, mine.stderr) == (0, "child\n0\nchild\n0\n", "")
    assert (real.returncode, real.stdout, real.stderr) == (0, "child\n0\nchild\n0\n", "")


def test_forked_children_start_with_the_imports_done_and_others_run_for_real():
    code = "import os, sys; print('torch' in sys.modules, os.getppid())"
    start = time.monotonic()
    # (in the fork server's own environment: an earlier test in this worker may have changed a
    # variable the preload read, after which commands run for real; RLCORE_FORKED_LOG says which)
    server = forked.server_environment()
    mine = forked.run([sys.executable, "-c", code], capture_output=True, text=True, env=server)
    preloaded, parent = mine.stdout.split()
    assert preloaded == "True" and int(parent) != os.getpid()  # the fork server's child
    assert time.monotonic() - start < 60
    # an environment that changes what the preloaded modules read on import: a real process
    env = {**server, "HF_HUB_OFFLINE": "0"}
    process = forked.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
    out, _ = process.communicate(timeout=60)
    assert isinstance(process, subprocess.Popen)
    assert out.split() == ["False", str(os.getpid())]
    # as does an interpreter option
    isolated = forked.Popen([sys.executable, "-I", "-c", "pass"])
    assert isinstance(isolated, subprocess.Popen) and isolated.wait(timeout=60) == 0


def test_a_signal_the_caller_ignores_stays_ignored_as_across_exec():
    """A job started in the background of a shell ignores SIGINT, and so do its children."""
    code = "import signal as s; print(s.getsignal(s.SIGINT) == s.SIG_IGN, s.getsignal(s.SIGHUP))"
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        mine, real = both([sys.executable, "-c", code])
    finally:
        signal.signal(signal.SIGINT, before)
    # a new process keeps an ignored SIGHUP (as under nohup) and has the default otherwise
    hup = int(
        signal.SIG_IGN if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN else signal.SIG_DFL
    )
    assert mine.stdout == real.stdout == f"True {hup}\n"


def test_a_loader_path_that_adds_no_library_folder_still_forks(tmp_path):
    """OpenCV's import prepends a folder its wheels do not ship, and an empty entry (the working
    folder), to ``LD_LIBRARY_PATH``: where neither holds a shared object, the loader finds what
    it found before, so the request is forked; a folder that holds one runs for real."""
    code = "import os, sys; print('torch' in sys.modules, os.getppid())"
    server = forked.server_environment()
    before = server.get("LD_LIBRARY_PATH", "")
    missing = tmp_path / "lib64"  # (not made)
    env = {**server, "LD_LIBRARY_PATH": f"{missing}::{before}"}
    mine = forked.Popen([sys.executable, "-c", code], env=env, cwd=tmp_path, stdout=subprocess.PIPE)
    assert not isinstance(mine, subprocess.Popen)
    out, _ = mine.communicate(timeout=60)
    assert out.split()[0] == b"True" and int(out.split()[1]) != os.getpid()
    # the same entries, once the working folder holds a shared object: a real process
    (tmp_path / "libplanted.so.1").write_bytes(b"")
    real = forked.Popen([sys.executable, "-c", code], env=env, cwd=tmp_path, stdout=subprocess.PIPE)
    assert isinstance(real, subprocess.Popen)
    assert real.communicate(timeout=60)[0].split() == [b"False", str(os.getpid()).encode()]
