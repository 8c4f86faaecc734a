"""Hardening probes: bad inputs, dry runs and faults, each run as a subprocess and classified.

    .venv/bin/python benchmarks/probes.py [--only REGEX] [--skip-long] [--list] [--work DIR]

Every probe starts ``examples/embodied/main.py`` or ``examples/reasoning/main.py`` (this checkout:
``cwd`` is the repository root and ``PYTHONPATH`` starts with it) in a session of its own, with a
timeout (60 s; 120 s for reasoning runs and faults; 360 s for the env placed apart that blocks
with no ``env.step_timeout_s``). On a timeout the probe's process group and every process it
started (its descendants and its session, recorded while it ran) are killed; nothing else is.

Outcomes:

- ``clear_error``: non-zero exit, no "Traceback (most recent call last)" in stdout+stderr, and the
  error message on stderr is ONE line naming the key or file (``rlcore: config error: ...``;
  ``rc_is_2`` says whether the status was 2, the documented one);
- ``unclear_error``: non-zero exit, no traceback, but the message is not one line, or does not
  name the key or file the probe is about;
- ``traceback``: a Python traceback in stdout or stderr;
- ``hang``: the probe did not end within its timeout (faults: the run did not exit within 30 s
  of the signal, or within its limit);
- ``silently_wrong``: exit 0 where the input is wrong (a dry run that accepts it included), or
  where the result is wrong (an ``ok`` probe whose checks failed);
- ``ok``: the expected clean behaviour happened (faults, and the bad inputs that a run must
  survive: a math answer that takes forever to compare, a reward that sleeps or holds the GIL);
- ``not_ok``: a fault probe whose checks failed without a traceback (details in ``failures``).

One JSON line per probe on stdout (name, category, expected, outcome, rc, seconds, error: the
first line of the error, command, and details), then one summary line (counts per category and
outcome, the probes that did not do what they should, dry runs that disagree with their run).
Progress goes to stderr. The work folder (temp files, run folders, each probe's stdout/stderr) is
kept and named on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pickle
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psutil

from rlcore.scheduler.processes import command_line, identity, listening

ROOT = Path(__file__).resolve().parents[1]
TRACEBACK = "Traceback (most recent call last)"
CONFIG_ERROR = "rlcore: config error:"

# tests/lm_fixtures.py TINY: a reasoning iteration in well under a second
TINY = [
    "actor.model.tiny.hidden_size=32",
    "actor.model.tiny.num_layers=1",
    "actor.model.tiny.num_heads=2",
    "actor.model.tiny.intermediate_size=64",
    "data.synthetic.num_train=512",
    "data.synthetic.num_val=16",
    "data.train_batch_size=8",
    "actor.ppo_mini_batch_size=4",
    "actor.ppo_micro_batch_size=2",
    "warmup.steps=5",
    "runner.total_iterations=2",
    "runner.val_every=0",
    "runner.progress=false",
    "logger.tensorboard=false",
]
BASE = {
    "embodied": ["runner.total_env_steps=2048", "runner.progress=false", "runner.output_dir=@OUT@"],
    "reasoning": [
        *TINY,
        "warmup.cache_dir=@CACHE@",
        "runner.total_iterations=1",
        "data.val_max_samples=8",
        "runner.output_dir=@OUT@",
    ],
}
TWO_SLOTS = ["cluster.device=cpu", "cluster.devices_per_node=2"]
ENV_APART = [*TWO_SLOTS, "cluster.component_placement={env:0,actor:1,rollout:1}"]
DATA_PARALLEL = [*TWO_SLOTS, "cluster.component_placement={env:all,actor:all,rollout:all}"]
REASONING_APART = [
    *TWO_SLOTS,
    "cluster.component_placement={actor:0,critic:0,ref:0,rollout:1,reward:1}",
]
LONG_EMBODIED = [
    "runner.total_env_steps=100000000",
    "runner.stop_at_threshold=false",
    "logger.console=true",
    "runner.run_name=run",
]
LONG_REASONING = ["runner.total_iterations=100000", "logger.console=true", "runner.run_name=run"]
# a 2-slot run whose env worker (built from a CartPole that records its pid) the probe kills
KILLED_ENV_WORKER = [
    "env.id=probe_envs:PidCartPole",
    "env.vector_mode=sync",
    "runner.total_env_steps=30720",
    "runner.stop_at_threshold=false",
    "runner.checkpoint_every=2",
    "logger.console=true",
    "runner.run_name=run",
    *ENV_APART,
]
STEP_LINE = r"(?m)^step \d+:"  # logger.console's line per iteration: training has started

# ---------------------------------------------------------------------------------------------
# Files the probes use (written once per harness run)

ENVS_PY = '''"""Tiny gymnasium envs that misbehave (hardening probes)."""
import itertools
import os
import time

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control import CartPoleEnv

HERE = os.path.dirname(os.path.abspath(__file__))


class Base(gym.Env):
    observation_space = gym.spaces.Box(-10.0, 10.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)
    horizon = 50

    def __init__(self):
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.obs(True), {}

    def step(self, action):
        self.t += 1
        self.on_step()
        return self.obs(False), self.reward(), False, self.t >= self.horizon, {}

    def on_step(self):
        pass

    def reward(self):
        return 1.0

    def obs(self, reset):
        return self.np_random.uniform(-1, 1, 4).astype(np.float32)


class NanObs(Base):
    def obs(self, reset):
        o = super().obs(reset)
        if not reset and self.t >= 3:
            o[0] = np.nan
        return o


class NanObsReset(Base):
    def obs(self, reset):
        o = super().obs(reset)
        if reset:
            o[:] = np.nan
        return o


class NanReward(Base):
    def reward(self):
        return float("nan") if self.t >= 3 else 1.0


class WrongShape(Base):
    def obs(self, reset):
        return np.zeros(3, np.float32) if not reset and self.t >= 3 else super().obs(reset)


class WrongShapeReset(Base):
    def obs(self, reset):
        return np.zeros(3, np.float32) if reset else super().obs(reset)


class StepRaises(Base):
    def on_step(self):
        if self.t >= 3:
            raise RuntimeError("probe env: step exploded")


class StepBlocks(Base):
    def on_step(self):
        if self.t >= 2:
            time.sleep(10**7)  # forever, as far as a run is concerned


class Endless(Base):
    horizon = 10**12  # an episode that never ends (no terminal state, no time limit)


class GilSpin(Base):
    def on_step(self):
        if self.t >= 2:
            sum(itertools.repeat(1, 10**13))  # C code holding the GIL, about an hour


class NegativeStart(Base):
    """Actions -1, 0, 1 (Discrete(3, start=-1)); an action outside them stops the run."""

    action_space = gym.spaces.Discrete(3, start=-1)

    def on_step(self):
        pass

    def step(self, action):
        if not self.action_space.contains(int(action)):
            raise RuntimeError(f"probe env: action {action} is outside {self.action_space}")
        return super().step(action)


class SmallImage(Base):
    observation_space = gym.spaces.Box(0, 255, (20, 20, 3), np.uint8)

    def obs(self, reset):
        return np.zeros((20, 20, 3), np.uint8)


class PidCartPole(CartPoleEnv):
    """CartPole that writes the pid of each process that builds it (and which rlcore it runs)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        import rlcore

        with open(os.path.join(HERE, "env_pids.txt"), "a") as f:
            f.write(f"{os.getpid()} {rlcore.__file__}\\n")
'''

REWARDS_PY = '''"""Custom rewards that misbehave (hardening probes)."""
import os
import sys
import time


def raises(response, answer):
    raise ValueError("probe reward exploded")


def returns_str(response, answer):
    return "high"


def returns_none(response, answer):
    return None


def returns_nan(response, answer):
    return float("nan")


def returns_inf(response, answer):
    return float("inf")


def sleeps(response, answer):
    time.sleep(100)
    return 1.0


def gil_spin(response, answer):
    return float(10**(10**10) % 7)  # a huge integer power: C code holding the GIL


def exits(response, answer):
    sys.exit(3)


def correct_as_text(response, answer):
    return {"score": 1.0, "correct": "False"}


def numpy_float32(response, answer):
    import numpy as np

    return np.float32(len(response) % 3)


def one_timeout(response, answer):
    """Plain numbers; the first response any scoring process sees takes 100 s (one timeout)."""
    flag = os.path.join(os.path.dirname(os.path.abspath(__file__)), "one_timeout.flag")
    try:
        os.close(os.open(flag, os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return float(len(response) % 2)
    time.sleep(100)
    return 0.0
'''


# ---------------------------------------------------------------------------------------------
# processes, their descendants, listening sockets (psutil, through rlcore.scheduler.processes)


def _table() -> dict[int, tuple[int, int, float]]:
    """pid -> (ppid, session, start time) of every live process."""
    table = {}
    for process in psutil.process_iter(["pid", "ppid", "status", "create_time"]):
        info = process.info
        if info["status"] == psutil.STATUS_ZOMBIE:
            continue
        with contextlib.suppress(OSError):
            table[info["pid"]] = (info["ppid"], os.getsid(info["pid"]), info["create_time"])
    return table


def _cmdline(pid: int) -> str:
    return command_line(pid)[:300]


def _alive(pid: int, start: float) -> bool:
    return identity(pid) == f"{pid}:{start}"


class Tracker:
    """Records every process that descends from ``root`` (parent links) or sits in its session,
    polling the process table while the probe runs; ``on_poll`` runs after each poll."""

    def __init__(
        self, root: int, interval: float = 0.25, on_poll: Callable[[Tracker], None] | None = None
    ) -> None:
        self.root = root
        self.seen: dict[int, tuple[float, str]] = {}  # pid -> (start time, cmdline)
        self.on_poll = on_poll
        self.interval = interval
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> Tracker:
        self.snapshot()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.snapshot()
            if self.on_poll is not None:
                try:
                    self.on_poll(self)
                except Exception as error:  # a probe's poll must never stop the tracking
                    print(f"probes: poll failed: {error!r}", file=sys.stderr)

    def snapshot(self) -> None:
        table = _table()
        children: dict[int, list[int]] = defaultdict(list)
        for pid, (ppid, _, _) in table.items():
            children[ppid].append(pid)
        found, stack = set(), [self.root]
        while stack:
            for child in children.get(stack.pop(), []):
                if child not in found:
                    found.add(child)
                    stack.append(child)
        found |= {pid for pid, row in table.items() if row[1] == self.root}
        found.discard(self.root)
        with self._lock:
            for pid in found:
                if pid not in self.seen:
                    self.seen[pid] = (table[pid][2], _cmdline(pid))

    def live(self) -> dict[int, str]:
        with self._lock:
            seen = dict(self.seen)
        # the current command line: a Ray worker renames itself (ray::...) once it has started
        return {
            pid: _cmdline(pid) or cmd for pid, (start, cmd) in seen.items() if _alive(pid, start)
        }

    def kill_all(self) -> list[int]:
        """SIGKILL every recorded process still alive (ours: the probe started them)."""
        killed = []
        with self._lock:
            seen = dict(self.seen)
        for pid, (start, _) in seen.items():
            if _alive(pid, start):
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except OSError:
                    pass
        return killed


# ---------------------------------------------------------------------------------------------
# Probes


@dataclass
class Probe:
    name: str
    category: str  # bad_input | dry_run | fault
    expected: str  # clear_error | ok
    entry: str  # embodied | reasoning
    overrides: list[str] = field(default_factory=list)
    args: list[str] = field(default_factory=list)  # --config PATH, --cluster PATH
    names: tuple[str, ...] = ()  # the error line must contain one of these (key or file)
    timeout: float | None = None
    env: dict[str, str] = field(default_factory=dict)
    setup: Callable[[Ctx, Path], None] | None = None
    driver: str = "plain"  # plain | signal | sigkill | kill_worker | listen
    check: Callable[[dict], list[str]] | None = None  # expected "ok": failures, [] when fine
    signum: int = 0
    group_signal: bool = False  # the signal goes to the whole process group (a terminal's ^C)
    watch: dict[str, str] = field(default_factory=dict)  # label -> regex: when first on stderr
    dry: bool = False  # also run it as runner.dry_run=true (the dry run must refuse it too)
    pair: str | None = None  # a dry run's own run
    note: str = ""
    command: list[str] | None = None  # another command than the entry's main.py (rlcore export)
    rlimit_fsize: int | None = None  # the largest file the run may write (RLIMIT_FSIZE, bytes)

    def limit(self) -> float:
        if self.timeout is not None:
            return self.timeout
        return 120.0 if self.entry == "reasoning" or self.category == "fault" else 60.0


class Ctx:
    def __init__(self, work: Path, python: str) -> None:
        self.work = work
        self.python = python
        self.cache = ROOT / ".cache" / "rlcore-probes"  # the warmed tiny model, built once
        self.envs = work / "envs"
        self.rewards = work / "rewards"
        self.tiny_model: Path | None = None

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        for key in ("WANDB_MODE", "WANDB_API_KEY", "PYTHONPATH"):
            env.pop(key, None)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(self.envs)])
        env["HF_HUB_OFFLINE"] = "1"
        env.update(extra or {})
        return env

    def subst(self, text: str, pdir: Path) -> str:
        return (
            text.replace("@DIR@", str(pdir))
            .replace("@OUT@", str(pdir / "out"))
            .replace("@CACHE@", str(self.cache))
            .replace("@REW@", str(self.rewards))
            .replace("@ROOT@", str(ROOT))
        )

    def command(self, probe: Probe, pdir: Path) -> list[str]:
        if probe.command is not None:
            return [self.python, *[self.subst(a, pdir) for a in probe.command]]
        # a probe's value replaces the base's (the base adds no duplicate key); a probe's own
        # items stay as given (a key it gives twice is its input)
        own = {item.split("=", 1)[0] for item in probe.overrides}
        last = {item.split("=", 1)[0]: item for item in BASE[probe.entry]}  # (TINY's, then ours)
        base = [item for key, item in last.items() if key not in own]
        items = [self.subst(item, pdir) for item in [*base, *probe.overrides]]
        script = f"examples/{probe.entry}/main.py"
        return [self.python, script, *[self.subst(a, pdir) for a in probe.args], *items]

    def run_quiet(self, probe: Probe, pdir: Path, what: str) -> dict:
        """A setup run (a finished run to reuse or resume): must exit 0."""
        pdir.mkdir(parents=True, exist_ok=True)
        cmd = self.command(probe, pdir)
        done = subprocess.run(
            cmd,
            cwd=ROOT,
            env=self.env(probe.env),
            capture_output=True,
            text=True,
            timeout=probe.limit(),
            start_new_session=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"setup {what} failed ({done.returncode}): {done.stderr[-2000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def broken_config(name: str, needle: str, broken: str) -> Callable[[Ctx, Path], None]:
    def setup(ctx: Ctx, pdir: Path) -> None:
        text = (ROOT / "configs" / f"{name}.yaml").read_text()
        assert needle in text, needle
        _write(pdir / "broken.yaml", text.replace(needle, broken, 1))

    return setup


def write_file(relative: str, text: str) -> Callable[[Ctx, Path], None]:
    def setup(ctx: Ctx, pdir: Path) -> None:
        _write(pdir / relative, text)

    return setup


def model_folder(damage: str) -> Callable[[Ctx, Path], None]:
    """A copy of the warmed tiny model folder, damaged."""

    def setup(ctx: Ctx, pdir: Path) -> None:
        assert ctx.tiny_model is not None, "the tiny model was not built"
        model = pdir / "model"
        shutil.copytree(ctx.tiny_model, model)
        if damage == "broken_json":
            (model / "config.json").write_text('{"model_type": "qwen2", "hidden_size": 32,,')
        elif damage == "no_model_type":
            (model / "config.json").write_text('{"hidden_size": 32}')
        elif damage == "no_weights":
            (model / "model.safetensors").unlink()
        elif damage == "garbage_weights":
            (model / "model.safetensors").write_bytes(b"\x00garbage" * 1000)
        elif damage == "no_eos":
            settings = json.loads((model / "tokenizer_config.json").read_text())
            settings.update(eos_token=None, pad_token=None)
            (model / "tokenizer_config.json").write_text(json.dumps(settings))
        elif damage == "no_tokenizer":
            for name in ("tokenizer.json", "tokenizer_config.json"):
                (model / name).unlink()
        else:
            raise ValueError(damage)

    return setup


def prompt_file(kind: str, bad: str) -> Callable[[Ctx, Path], None]:
    """16 GSM8K-style rows; row 5's prompt is ``bad`` (null, empty), its answer a JSON boolean
    (bool), or every answer a tower."""

    def setup(ctx: Ctx, pdir: Path) -> None:
        rows = [{"question": f"What is {i} + 3?", "answer": f"#### {i + 3}"} for i in range(16)]
        if bad == "null":
            rows[5]["question"] = None
        elif bad == "empty":
            rows[5]["question"] = ""
        elif bad == "bool":
            rows[5]["answer"] = True  # JSON true: it read as the text "True"
        elif bad == "tower":
            rows = [{"question": f"What is {i} + 9?", "answer": "9^{9^{9^{9}}}"} for i in range(16)]
        if kind == "jsonl":
            _write(pdir / "data.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pa.table(
                {
                    "question": pa.array([r["question"] for r in rows], pa.string()),
                    "answer": [r["answer"] for r in rows],
                }
            )
            pq.write_table(table, pdir / "data.parquet")

    return setup


def finished_run(entry: str, overrides: list[str]) -> Callable[[Ctx, Path], None]:
    """A run named ``done`` in the probe's output folder, run to its end."""

    def setup(ctx: Ctx, pdir: Path) -> None:
        base = Probe("setup", "setup", "ok", entry, [*overrides, "runner.run_name=done"])
        ctx.run_quiet(base, pdir, "finished run")

    return setup


def output_file(ctx: Ctx, pdir: Path) -> None:
    _write(pdir / "afile", "a regular file, not a folder\n")


# Run folders tampered with (issue 30): a finished run named "done", then changed.

PWNED = "PWNED"  # a planted payload creates this file in the probe's folder when it runs
VICTIM = "victim.json"  # a file outside the run folder that a link in it points to


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {shlex.quote(str(self.marker))}",))


def payload(pdir: Path) -> bytes:
    """A pickle that, when loaded, creates ``pdir/PWNED`` (code executed)."""
    return pickle.dumps(_Payload(pdir / PWNED))


def _victims_changed(pdir: Path) -> list[str]:
    victim = pdir / VICTIM
    original = pdir / (VICTIM + ".orig")
    if victim.exists() and original.exists() and victim.read_bytes() != original.read_bytes():
        return [str(victim)]
    return []


def _rehash(checkpoint: Path, relative: str) -> None:
    """Make the checkpoint's manifest agree with the file ``relative`` as it is now (an
    attacker who can write the folder can write the manifest too)."""
    import hashlib

    manifest = json.loads((checkpoint / "manifest.json").read_text())
    data = (checkpoint / relative).read_bytes()
    manifest["files"][relative] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (checkpoint / "manifest.json").write_text(json.dumps(manifest, indent=1))


def tampered_run(entry: str, overrides: list[str], how: str) -> Callable[[Ctx, Path], None]:
    """A finished run ``done`` (checkpoints every 4 iterations) in the probe's output folder,
    then tampered with as ``how`` says."""
    finish = finished_run(entry, ["runner.checkpoint_every=4", *overrides])

    def setup(ctx: Ctx, pdir: Path) -> None:
        if how == "data_changed":
            prompt_file("jsonl", "none")(ctx, pdir)
        finish(ctx, pdir)
        run = pdir / "out" / "done"
        checkpoints = sorted((run / "checkpoints").glob("iter_*"))
        newest = checkpoints[-1]
        if how == "shard_metadata":  # a pickle where torch's DCP reader would look
            (newest / "actor" / "shards").mkdir()
            (newest / "actor" / "shards" / ".metadata").write_bytes(payload(pdir))
        elif how == "crafted_pt":  # the trainer state replaced by a pickle, manifest agreeing
            (newest / "actor" / "trainer_rank0.pt").write_bytes(payload(pdir))
            _rehash(newest, "actor/trainer_rank0.pt")
        elif how in ("config_link", "summary_link"):
            name = "config.json" if how == "config_link" else "summary.json"
            text = (run / name).read_text()
            (pdir / VICTIM).write_text(text)
            (pdir / (VICTIM + ".orig")).write_text(text)
            (run / name).unlink()
            (run / name).symlink_to(pdir / VICTIM)
        elif how == "all_broken":  # every checkpoint incomplete (no manifest)
            for checkpoint in checkpoints:
                (checkpoint / "manifest.json").unlink()
        elif how == "env_module":  # driver.json names a module env whose import runs code
            _write(ctx.envs / "probe_pwn.py", f"open({str(pdir / PWNED)!r}, 'w').close()\n")
            for checkpoint in checkpoints:
                driver = json.loads((checkpoint / "driver.json").read_text())
                driver["config"]["env"]["id"] = "probe_pwn:Env"
                (checkpoint / "driver.json").write_text(json.dumps(driver))
                _rehash(checkpoint, "driver.json")
        elif how == "locked":  # another process holds the run folder's lock for 40 s
            holder = subprocess.Popen(
                [
                    ctx.python,
                    "-c",
                    "import fcntl, sys, time; f = open(sys.argv[1], 'a'); "
                    "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(40)",
                    str(run / ".lock"),
                ],
                stdout=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
            assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        elif how == "data_changed":  # the prompt file rewritten at the same path
            rows = [{"question": f"What is {i} + 5?", "answer": f"#### {i + 5}"} for i in range(16)]
            _write(pdir / "data.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
        elif how == "target_not_empty":
            _write(pdir / "target" / "notes.txt", "someone else's file\n")
        elif how != "none":
            raise ValueError(how)

    return setup


def check_home_tilde(result: dict) -> list[str]:
    failures = check_rc0(result)
    pdir = result["_pdir"]
    if not (pdir / "home" / "tilde_out").is_dir():
        failures.append("no run folder under $HOME/tilde_out: the quoted ~ was not expanded")
    if (ROOT / "~").exists():
        failures.append(f"a folder named '~' was made in {ROOT}")
    return failures


def check_summary_written(result: dict) -> list[str]:
    failures = check_rc0(result)
    if not list(result["_pdir"].rglob("summary.json")):
        failures.append("no summary.json was written")
    return failures


def check_planted_skipped(result: dict) -> list[str]:
    failures = check_rc0(result)
    if not re.search(
        r"skipped checkpoint iter_000008: .*\.metadata is not in the manifest", result["_stderr"]
    ):
        failures.append("no stderr line names the planted file and the skipped checkpoint")
    return failures


def check_eval_cut(result: dict) -> list[str]:
    failures = check_rc0(result)
    if not re.search(r"runner\.eval_max_steps", result["_stderr"]):
        failures.append("no stderr line says evaluation episodes were cut (runner.eval_max_steps)")
    return failures


# Checks of the probes that must end well ("ok"); each returns the failures.


def check_rc0(result: dict) -> list[str]:
    return [] if result["rc"] == 0 else [f"exit status {result['rc']}, not 0"]


def check_reward_timeouts_said(result: dict) -> list[str]:
    failures = check_rc0(result)
    if not re.search(r"reward\.rules\.timeout_s", result["_stderr"]):
        failures.append("no stderr line says that responses timed out (reward.rules.timeout_s)")
    return failures


def check_wandb_offline(result: dict) -> list[str]:
    failures = check_rc0(result)
    seen = result["details"].get("watched", {}).get("offline")
    if seen is None:
        failures.append("no stderr line says wandb logs offline")
    elif seen > 30:
        failures.append(f"the offline line came {seen:.1f} s after start (over 30 s)")
    return failures


def _bad(
    name: str,
    entry: str,
    overrides: list[str],
    names: tuple[str, ...],
    *,
    dry: bool = True,
    **kw: Any,
) -> Probe:
    return Probe(name, "bad_input", "clear_error", entry, overrides, names=names, dry=dry, **kw)


def probes() -> list[Probe]:
    env_id = ("env.id", "probe_envs")
    reward = ("reward.rules.custom_fn",)
    custom = ["reward.kind=custom"]
    out: list[Probe] = []
    add = out.append

    # 1. YAML syntax errors: a config file, a cluster file
    add(
        _bad(
            "yaml_config_syntax_embodied",
            "embodied",
            [],
            ("broken.yaml",),
            args=["--config", "@DIR@/broken.yaml"],
            setup=broken_config("embodied/cartpole_ppo", "  num_envs: 64", "  num_envs: [64"),
        )
    )
    add(
        _bad(
            "yaml_config_syntax_reasoning",
            "reasoning",
            [],
            ("broken.yaml",),
            args=["--config", "@DIR@/broken.yaml"],
            setup=broken_config(
                "reasoning/tiny_arith_ppo", "  train_batch_size: 128", "  train_batch_size: {128"
            ),
        )
    )
    add(
        _bad(
            "yaml_cluster_syntax",
            "embodied",
            [],
            ("cluster.yaml",),
            args=["--cluster", "@DIR@/cluster.yaml"],
            setup=write_file("cluster.yaml", "num_nodes: 1\ndevice: [auto\n"),
        )
    )
    add(
        _bad(
            "yaml_cluster_not_a_mapping",
            "embodied",
            [],
            ("cluster.yaml",),
            args=["--cluster", "@DIR@/cluster.yaml"],
            setup=write_file("cluster.yaml", "- num_nodes\n- device\n"),
        )
    )
    add(
        _bad(
            "config_file_missing",
            "embodied",
            [],
            ("nothere.yaml",),
            args=["--config", "@DIR@/nothere.yaml"],
        )
    )

    # 2. custom envs that misbehave (runtime: no dry run can see them)
    for name, cls, extra in [
        ("env_nan_obs_step", "NanObs", []),
        ("env_nan_obs_reset", "NanObsReset", []),
        ("env_nan_reward", "NanReward", []),
        ("env_wrong_shape_step", "WrongShape", []),
        ("env_wrong_shape_reset", "WrongShapeReset", []),
        ("env_step_raises", "StepRaises", []),
        (
            "env_step_raises_async",
            "StepRaises",
            ["env.vector_mode=async", "env.num_envs=2", "actor.ppo_mini_batch_size=16"],
        ),
        (
            "env_nan_obs_async",
            "NanObs",
            ["env.vector_mode=async", "env.num_envs=2", "actor.ppo_mini_batch_size=16"],
        ),
        ("env_step_raises_apart", "StepRaises", ENV_APART),
    ]:
        add(
            _bad(
                name,
                "embodied",
                [f"env.id=probe_envs:{cls}", *extra],
                env_id,
                dry=False,
                timeout=120 if "apart" in name else None,
            )
        )

    # 3. custom rewards that misbehave
    for name, fn in [
        ("reward_raises", "raises"),
        ("reward_returns_str", "returns_str"),
        ("reward_returns_none", "returns_none"),
        ("reward_returns_nan", "returns_nan"),
        ("reward_returns_inf", "returns_inf"),
    ]:
        add(
            _bad(
                name,
                "reasoning",
                [*custom, f"reward.rules.custom_fn=@REW@/rewards.py:{fn}"],
                reward,
                dry=False,
            )
        )
    add(
        _bad(
            "reward_syntax_error",
            "reasoning",
            [*custom, "reward.rules.custom_fn=@DIR@/bad_syntax.py:f"],
            reward,
            setup=write_file("bad_syntax.py", "def f(response, answer:\n    return 1.0\n"),
        )
    )
    add(
        _bad(
            "reward_missing_file",
            "reasoning",
            [*custom, "reward.rules.custom_fn=@DIR@/nothere.py:f"],
            reward,
        )
    )
    add(
        _bad(
            "reward_missing_function",
            "reasoning",
            [*custom, "reward.rules.custom_fn=@REW@/rewards.py:nope"],
            reward,
        )
    )

    # 4. a corrupt model folder
    for damage in ("broken_json", "no_model_type", "no_weights", "garbage_weights", "no_tokenizer"):
        add(
            _bad(
                f"model_{damage}",
                "reasoning",
                ["actor.model.path=@DIR@/model", "warmup.steps=0"],
                ("actor.model.path", "/model"),
                setup=model_folder(damage),
            )
        )

    # 5. runner.output_dir is a regular file
    add(
        _bad(
            "output_dir_is_file_embodied",
            "embodied",
            ["runner.output_dir=@DIR@/afile"],
            ("runner.output_dir", "afile"),
            setup=output_file,
        )
    )
    add(
        _bad(
            "output_dir_is_file_named_run",
            "embodied",
            ["runner.output_dir=@DIR@/afile", "runner.run_name=x"],
            ("runner.output_dir", "afile"),
            setup=output_file,
        )
    )
    add(
        _bad(
            "output_dir_is_file_reasoning",
            "reasoning",
            ["runner.output_dir=@DIR@/afile"],
            ("runner.output_dir", "afile"),
            setup=output_file,
        )
    )

    # 6. values torch / transformers would reject
    for name, entry, item in [
        ("lr_negative_embodied", "embodied", "actor.optim.lr=-0.001"),
        ("lr_zero_embodied", "embodied", "actor.optim.lr=0"),
        ("lr_negative_reasoning", "reasoning", "actor.optim.lr=-0.001"),
        ("critic_lr_negative", "reasoning", "critic.optim.lr=-0.001"),
        ("temperature_zero", "reasoning", "rollout.temperature=0"),
        ("top_k_minus_one", "reasoning", "rollout.top_k=-1"),
        ("top_p_zero", "reasoning", "rollout.top_p=0"),
        ("hidden_sizes_empty", "embodied", "actor.model.hidden_sizes=[]"),
        ("hidden_sizes_zero", "embodied", "actor.model.hidden_sizes=[0]"),
        ("val_max_samples_zero", "reasoning", "data.val_max_samples=0"),
        # 7. negative max_grad_norm
        ("max_grad_norm_negative_embodied", "embodied", "actor.optim.max_grad_norm=-1"),
        ("max_grad_norm_negative_reasoning", "reasoning", "actor.optim.max_grad_norm=-1"),
        ("critic_max_grad_norm_negative", "reasoning", "critic.optim.max_grad_norm=-1"),
        # 8.
        ("reward_timeout_negative", "reasoning", "reward.rules.timeout_s=-1"),
        ("total_env_steps_zero", "embodied", "runner.total_env_steps=0"),
        ("total_iterations_zero", "reasoning", "runner.total_iterations=0"),
        # 8b. inputs of the first hour: an env argument its constructor lacks, a hub id that is
        # in no cache with no hub to reach, verl token lengths that disagree for one model
        ("env_kwargs_unknown_name", "embodied", "env.kwargs={gravity:3}"),
        ("hub_id_not_cached_offline", "reasoning", "actor.model.path=nobody/no-such-model"),
    ]:
        add(_bad(name, entry, [item], (item.split("=")[0],)))
    add(
        _bad(
            "verl_token_lengths_disagree",
            "reasoning",
            [
                "actor_rollout_ref.actor.use_dynamic_bsz=true",
                "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4096",
                "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=true",
                "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=8192",
                "actor.ppo_micro_batch_size=null",
            ],
            ("actor.max_tokens_per_micro_batch",),
        )
    )
    for name, entry, value in [
        ("run_name_dotdot_embodied", "embodied", "../x"),
        ("run_name_slash_embodied", "embodied", "a/b"),
        ("run_name_dotdot_reasoning", "reasoning", "../x"),
        ("run_name_slash_reasoning", "reasoning", "a/b"),
    ]:
        add(_bad(name, entry, [f"runner.run_name={value}"], ("runner.run_name",)))

    # 9. null / empty prompts in a data file
    for name, kind, bad in [
        ("data_null_prompt_jsonl", "jsonl", "null"),
        ("data_empty_prompt_jsonl", "jsonl", "empty"),
        ("data_null_prompt_parquet", "parquet", "null"),
    ]:
        add(
            _bad(
                name,
                "reasoning",
                [f"data.train_files=[@DIR@/data.{kind}]"],
                ("data.train_files", f"data.{kind}"),
                setup=prompt_file(kind, bad),
            )
        )
    add(
        _bad(
            "data_null_prompt_val",
            "reasoning",
            ["data.val_files=[@DIR@/data.jsonl]"],
            ("data.val_files", "data.jsonl"),
            setup=prompt_file("jsonl", "null"),
        )
    )

    # 9b. second round (issue 30): a JSON boolean answer, a key typed twice, prompts and
    # responses longer than the model's positions
    add(
        _bad(
            "data_boolean_answer",
            "reasoning",
            ["data.train_files=[@DIR@/data.jsonl]"],
            ("data.jsonl", "boolean"),
            setup=prompt_file("jsonl", "bool"),
        )
    )
    add(_bad("override_given_twice", "embodied", ["runner.seed=1", "runner.seed=2"], ("seed",)))
    add(
        _bad(
            "longer_than_the_model_positions",
            "reasoning",
            ["data.max_prompt_length=500", "data.max_response_length=100"],
            ("data.max_prompt_length", "max_position_embeddings"),
        )
    )

    # 10. a finished run: its name again without resume; resumed with a smaller target
    emb_done = finished_run("embodied", ["runner.total_env_steps=4096"])
    rea_done = finished_run("reasoning", ["runner.total_iterations=3"])
    add(
        _bad(
            "run_name_reused_embodied",
            "embodied",
            ["runner.run_name=done"],
            ("runner.run_name",),
            setup=emb_done,
        )
    )
    add(
        _bad(
            "run_name_reused_reasoning",
            "reasoning",
            ["runner.run_name=done"],
            ("runner.run_name",),
            setup=rea_done,
        )
    )
    target_e = ("runner.total_env_steps", "runner.resume")
    target_r = ("runner.total_iterations", "runner.resume")
    add(
        _bad(
            "resume_dir_smaller_target_embodied",
            "embodied",
            ["runner.resume_dir=@OUT@/done", "runner.total_env_steps=1024"],
            target_e,
            setup=emb_done,
        )
    )
    add(
        _bad(
            "resume_auto_smaller_target_embodied",
            "embodied",
            ["runner.resume=auto", "runner.run_name=done", "runner.total_env_steps=1024"],
            target_e,
            setup=emb_done,
        )
    )
    add(
        _bad(
            "resume_dir_smaller_target_reasoning",
            "reasoning",
            ["runner.resume_dir=@OUT@/done", "runner.total_iterations=1"],
            target_r,
            setup=rea_done,
        )
    )
    add(
        _bad(
            "resume_auto_smaller_target_reasoning",
            "reasoning",
            ["runner.resume=auto", "runner.run_name=done", "runner.total_iterations=1"],
            target_r,
            setup=rea_done,
        )
    )

    # 11. a math answer that takes forever to compare: scored 0 after reward.rules.timeout_s
    add(
        Probe(
            "math_tower_answer",
            "bad_input",
            "ok",
            "reasoning",
            [
                "reward.kind=math",
                "data.answer_format=plain",
                "data.train_files=[@DIR@/data.jsonl]",
                "data.val_files=[@DIR@/data.jsonl]",
            ],
            setup=prompt_file("jsonl", "tower"),
            check=check_rc0,
            watch={"timeouts": r"reward\.rules\.timeout_s"},
        )
    )
    # 12. a reward that sleeps 100 s, one that spins in C holding the GIL
    for name, fn in [("reward_sleeps_100s", "sleeps"), ("reward_gil_spin", "gil_spin")]:
        add(
            Probe(
                name,
                "bad_input",
                "ok",
                "reasoning",
                [
                    *custom,
                    f"reward.rules.custom_fn=@REW@/rewards.py:{fn}",
                    "reward.rules.timeout_s=1",
                    "reward.rules.max_timeout_share=1",  # (every response times out: no storm stop)
                ],
                check=check_reward_timeouts_said,
                watch={"timeouts": r"reward\.rules\.timeout_s"},
            )
        )

    # 13. an env whose step blocks forever
    blocks = ["env.id=probe_envs:StepBlocks"]
    add(
        _bad(
            "env_step_blocks_inprocess",
            "embodied",
            [*blocks, "env.step_timeout_s=1"],
            ("env.step_timeout_s",),
            dry=False,
        )
    )
    add(
        _bad(
            "env_step_blocks_async",
            "embodied",
            [
                *blocks,
                "env.step_timeout_s=1",
                "env.vector_mode=async",
                "env.num_envs=2",
                "actor.ppo_mini_batch_size=16",
            ],
            ("env.step_timeout_s",),
            dry=False,
        )
    )
    add(
        _bad(
            "env_step_blocks_apart_default_deadline",
            "embodied",
            [*blocks, *ENV_APART],
            ("env.step_timeout_s",),
            dry=False,
            timeout=360,
            note="no env.step_timeout_s: the documented default for an env placed apart is 300 s",
        )
    )

    # 14. the dry run of every bad config value above
    for probe in list(out):
        if probe.dry:
            out.append(
                replace(
                    probe,
                    name=f"dry_run:{probe.name}",
                    category="dry_run",
                    overrides=[*probe.overrides, "runner.dry_run=true"],
                    pair=probe.name,
                    dry=False,
                    timeout=60,
                )
            )

    # 15. SIGINT / SIGTERM
    sync_e = [*LONG_EMBODIED, "env.vector_mode=sync"]
    async_e = [
        *LONG_EMBODIED,
        "env.vector_mode=async",
        "env.num_envs=4",
        "actor.ppo_mini_batch_size=32",
    ]
    for signame, signum in (("sigint", signal.SIGINT), ("sigterm", signal.SIGTERM)):
        add(
            Probe(
                f"{signame}_embodied_sync",
                "fault",
                "ok",
                "embodied",
                sync_e,
                driver="signal",
                signum=signum,
            )
        )
        add(
            Probe(
                f"{signame}_embodied_async",
                "fault",
                "ok",
                "embodied",
                async_e,
                driver="signal",
                signum=signum,
            )
        )
        add(
            Probe(
                f"{signame}_reasoning",
                "fault",
                "ok",
                "reasoning",
                LONG_REASONING,
                driver="signal",
                signum=signum,
            )
        )
    add(
        Probe(
            "sigint_group_embodied_async",
            "fault",
            "ok",
            "embodied",
            async_e,
            driver="signal",
            signum=signal.SIGINT,
            group_signal=True,
            note="SIGINT to the whole process group, as a terminal's Ctrl-C",
        )
    )
    add(
        Probe(
            "sigterm_embodied_2slot",
            "fault",
            "ok",
            "embodied",
            [*LONG_EMBODIED, *ENV_APART],
            driver="signal",
            signum=signal.SIGTERM,
        )
    )
    # 16. SIGKILL of the driver of a 2-slot run
    add(
        Probe(
            "sigkill_driver_2slot_embodied",
            "fault",
            "ok",
            "embodied",
            [*LONG_EMBODIED, *ENV_APART],
            driver="sigkill",
        )
    )
    add(
        Probe(
            "sigkill_driver_2slot_reasoning",
            "fault",
            "ok",
            "reasoning",
            [*LONG_REASONING, *REASONING_APART],
            driver="sigkill",
        )
    )
    # 17. kill -9 of the env's Ray worker: the run restarts it and finishes
    add(
        Probe(
            "kill9_env_worker_2slot",
            "fault",
            "ok",
            "embodied",
            KILLED_ENV_WORKER,
            driver="kill_worker",
        )
    )
    # 18. wandb with a dummy key and no network: offline, and the run finishes
    add(
        Probe(
            "wandb_dummy_key_embodied",
            "fault",
            "ok",
            "embodied",
            ["logger.wandb=true"],
            env={"WANDB_API_KEY": "dummy"},
            check=check_wandb_offline,
            watch={"offline": r"(?i)offline"},
            timeout=60,
        )
    )
    add(
        Probe(
            "wandb_dummy_key_reasoning",
            "fault",
            "ok",
            "reasoning",
            ["logger.wandb=true"],
            env={"WANDB_API_KEY": "dummy"},
            check=check_wandb_offline,
            watch={"offline": r"(?i)offline"},
        )
    )
    # 19. what a 2-slot local run listens on
    add(
        Probe(
            "listen_loopback_env_apart",
            "fault",
            "ok",
            "embodied",
            ["runner.total_env_steps=20480", "runner.stop_at_threshold=false", *ENV_APART],
            driver="listen",
        )
    )
    add(
        Probe(
            "listen_loopback_data_parallel",
            "fault",
            "ok",
            "embodied",
            ["runner.total_env_steps=20480", "runner.stop_at_threshold=false", *DATA_PARALLEL],
            driver="listen",
        )
    )
    add(
        Probe(
            "listen_loopback_reasoning_apart",
            "fault",
            "ok",
            "reasoning",
            ["runner.total_iterations=4", *REASONING_APART],
            driver="listen",
        )
    )

    # 20. run folders tampered with, and the hardening of issue 30
    emb_resume = ["runner.run_name=done", "runner.resume=auto", "runner.total_env_steps=6144"]
    rea_resume = ["runner.run_name=done", "runner.resume=auto", "runner.total_iterations=3"]
    export = ["-m", "rlcore.cli", "export"]
    # a planted file makes its checkpoint incomplete: skipped and named, the older one used
    for name, command in [
        ("resume_shard_metadata_skipped", None),
        ("export_shard_metadata_skipped", [*export, "@DIR@/out/done", "@DIR@/exported"]),
    ]:
        add(
            Probe(
                name,
                "bad_input",
                "ok",
                "embodied",
                emb_resume if command is None else [],
                command=command,
                setup=tampered_run("embodied", ["runner.total_env_steps=4096"], "shard_metadata"),
                check=check_planted_skipped,
            )
        )
    # ... and refused when it is the checkpoint asked for
    add(
        _bad(
            "resume_dir_shard_metadata",
            "embodied",
            [*emb_resume[2:], "runner.resume_dir=@DIR@/out/done/checkpoints/iter_000008"],
            (".metadata",),
            setup=tampered_run("embodied", ["runner.total_env_steps=4096"], "shard_metadata"),
        )
    )
    for how, names in [
        ("crafted_pt", ("trainer_rank0.pt",)),
        ("config_link", ("config.json",)),
        ("summary_link", ("summary.json",)),
        ("all_broken", ("runner.resume",)),
        ("locked", (".lock", "runner.run_name", "runner.output_dir")),
    ]:
        add(
            _bad(
                f"resume_{how}",
                "embodied",
                emb_resume,
                names,
                setup=tampered_run("embodied", ["runner.total_env_steps=4096"], how),
                dry=how not in ("crafted_pt", "summary_link"),
            )
        )
    data = ["data.train_files=[@DIR@/data.jsonl]", "data.val_files=[@DIR@/data.jsonl]"]
    add(
        _bad(
            "resume_data_changed",
            "reasoning",
            [*rea_resume, *data],
            ("data.train_files", "data.jsonl"),
            setup=tampered_run("reasoning", ["runner.total_iterations=2", *data], "data_changed"),
        )
    )
    for how, target, names in [
        ("shard_metadata", "@DIR@/exported", (".metadata",)),
        ("env_module", "@DIR@/exported", ("--env",)),
        ("none", "@DIR@/out/done/exported", ("run folder", "exported")),
        ("target_not_empty", "@DIR@/target", ("--force", "target")),
    ]:
        add(
            _bad(
                f"export_{how}" if how != "none" else "export_into_the_run_folder",
                "embodied",
                [],
                names,
                command=[
                    *export,
                    "@DIR@/out/done/checkpoints/iter_000008"
                    if how == "shard_metadata"
                    else "@DIR@/out/done",
                    target,
                ],
                setup=tampered_run("embodied", ["runner.total_env_steps=4096"], how),
                dry=False,
            )
        )
    add(
        Probe(
            "eval_episode_never_ends",
            "bad_input",
            "ok",
            "embodied",
            ["env.id=probe_envs:Endless", "runner.eval_max_steps=3000"],
            check=check_eval_cut,
        )
    )
    add(
        _bad(
            "env_stuck_in_c_apart",
            "embodied",
            [
                "env.id=probe_envs:GilSpin",
                "env.vector_mode=sync",
                "env.step_timeout_s=1",
                "runner.max_restarts=0",
                *ENV_APART,
            ],
            ("env.step_timeout_s", "watchdog"),
            dry=False,
            timeout=120,
        )
    )
    add(
        _bad(
            "reward_timeout_storm",
            "reasoning",
            [*custom, "reward.rules.custom_fn=@REW@/rewards.py:sleeps", "reward.rules.timeout_s=1"],
            ("reward.rules.max_timeout_share",),
            dry=False,
        )
    )
    for name, fn in [("reward_sys_exit", "exits"), ("reward_correct_as_text", "correct_as_text")]:
        add(
            _bad(
                name,
                "reasoning",
                [*custom, f"reward.rules.custom_fn=@REW@/rewards.py:{fn}"],
                ("reward.rules.custom_fn",),
                dry=False,
            )
        )
    for name, fn, extra in [
        ("reward_numpy_float32", "numpy_float32", []),
        ("reward_plain_numbers_one_timeout", "one_timeout", ["reward.rules.timeout_s=1"]),
    ]:
        add(
            Probe(
                name,
                "bad_input",
                "ok",
                "reasoning",
                [
                    *custom,
                    f"reward.rules.custom_fn=@REW@/rewards.py:{fn}",
                    *extra,
                    "runner.val_every=1",
                ],
                check=check_summary_written,
            )
        )
    add(
        Probe(
            "discrete_negative_start",
            "bad_input",
            "ok",
            "embodied",
            ["env.id=probe_envs:NegativeStart"],
            check=check_rc0,
        )
    )
    add(_bad("cnn_image_too_small", "embodied", ["env.id=probe_envs:SmallImage"], ("env.id",)))
    add(
        _bad(
            "tokenizer_without_eos_or_pad",
            "reasoning",
            ["actor.model.path=@DIR@/model", "warmup.steps=0"],
            ("actor.model.path",),
            setup=model_folder("no_eos"),
        )
    )
    add(_bad("run_name_300_chars", "embodied", ["runner.run_name=" + "r" * 300], ("run_name",)))
    add(_bad("seed_out_of_range", "embodied", ["runner.seed=99999999999999999999"], ("seed",)))
    add(
        _bad(
            "file_size_limit_while_checkpointing",
            "embodied",
            ["runner.checkpoint_every=1"],
            ("checkpoint", "File too large", "file size"),
            rlimit_fsize=30_000,  # (the trainer state: 51 kB with the shared trunk)
            dry=False,
        )
    )
    add(
        Probe(
            "output_dir_quoted_tilde",
            "bad_input",
            "ok",
            "embodied",
            ["runner.output_dir='~/tilde_out'"],
            env={"HOME": "@DIR@/home"},
            setup=write_file("home/.keep", ""),
            check=check_home_tilde,
        )
    )
    add(
        Probe(
            "sighup_embodied",
            "fault",
            "ok",
            "embodied",
            LONG_EMBODIED,
            driver="signal",
            signum=signal.SIGHUP,
        )
    )
    add(
        Probe(
            "kill9_env_worker_no_restarts",
            "fault",
            "clear_error",
            "embodied",
            [*KILLED_ENV_WORKER, "runner.max_restarts=0"],
            names=("runner.max_restarts",),
            driver="kill_worker",
        )
    )
    return out


# ---------------------------------------------------------------------------------------------
# Running and classifying one probe


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _error_lines(stderr: str) -> list[str]:
    lines = _lines(stderr)
    config = [line for line in lines if line.startswith(CONFIG_ERROR)]
    if config:
        return config
    errors = [line for line in lines if re.search(r"(?i)error|exception|failed|refus", line)]
    return errors or lines[-1:]


def _exception_line(text: str) -> str:
    """The exception line that ends the first traceback in ``text``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if TRACEBACK in line)
    for line in lines[start + 1 :]:
        if line and not line.startswith((" ", "\t")) and TRACEBACK not in line:
            return line.strip()[:400]
    return lines[start].strip()[:400]


def classify_exit(probe: Probe, rc: int | None, stdout: str, stderr: str) -> tuple[str, str]:
    """(outcome, error line) of a run that ended (``rc``) or did not (None)."""
    both = stdout + stderr
    errors = _error_lines(stderr)
    first = errors[0][:400] if errors else ""
    if rc is None:
        return "hang", first
    if TRACEBACK in both:
        return "traceback", _exception_line(both)
    if rc != 0:
        named = bool(errors) and (not probe.names or any(n in errors[0] for n in probe.names))
        if len(errors) == 1 and named:
            return "clear_error", first
        return "unclear_error", first
    return "exit_0", first


class Runner:
    def __init__(self, ctx: Ctx) -> None:
        self.ctx = ctx

    def run(self, probe: Probe) -> dict:
        pdir = self.ctx.work / re.sub(r"[^\w.-]", "_", probe.name)
        if pdir.exists():
            shutil.rmtree(pdir)
        pdir.mkdir(parents=True)
        details: dict[str, Any] = {}
        result: dict[str, Any] = {
            "name": probe.name,
            "category": probe.category,
            "expected": probe.expected,
        }
        if probe.pair:
            result["pair"] = probe.pair
        if probe.note:
            details["note"] = probe.note
        try:
            if probe.setup is not None:
                probe.setup(self.ctx, pdir)
        except Exception as error:
            result.update(
                outcome="not_built",
                as_expected=False,
                rc=None,
                seconds=0.0,
                error=f"setup failed: {type(error).__name__}: {error}"[:600],
                command="",
                details=details,
            )
            return result
        (self.ctx.envs / "env_pids.txt").unlink(missing_ok=True)
        cmd = self.ctx.command(probe, pdir)
        env = self.ctx.env({k: self.ctx.subst(v, pdir) for k, v in probe.env.items()})
        shown_env = " ".join(f"{k}={v}" for k, v in probe.env.items())
        result["command"] = (f"{shown_env} " if shown_env else "") + shlex.join(cmd)
        out_path, err_path = pdir / "stdout.txt", pdir / "stderr.txt"
        start = time.monotonic()
        limit_files = None
        if probe.rlimit_fsize is not None:
            size = probe.rlimit_fsize
            limit_files = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))  # noqa: E731
        with open(out_path, "w") as out_file, open(err_path, "w") as err_file:
            process = subprocess.Popen(
                cmd,
                cwd=ROOT,
                env=env,
                stdout=out_file,
                stderr=err_file,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=limit_files,
            )
        listen: dict[tuple, dict] = {}
        on_poll = None
        if probe.driver == "listen":
            on_poll = lambda tracker: _poll_listen(tracker, listen)  # noqa: E731
        tracker = Tracker(process.pid, on_poll=on_poll).start()
        try:
            rc, failures = self._drive(probe, process, tracker, err_path, start, pdir, details)
        finally:
            tracker.stop()
            tracker.snapshot()
        seconds = time.monotonic() - start
        # Whatever it started must be gone: poll (20 s for faults, 10 s otherwise), then kill.
        grace = 20.0 if probe.category == "fault" else 10.0
        deadline = time.monotonic() + grace
        while tracker.live() and time.monotonic() < deadline:
            time.sleep(0.25)
        left = tracker.live()
        if left:
            details["left_processes"] = [f"{pid} {cmd}"[:200] for pid, cmd in sorted(left.items())]
            if probe.category == "fault":
                failures.append(f"{len(left)} process(es) left {grace:g} s after the run ended")
                # how long they linger (up to 90 s more), before they are killed below
                ended, linger = time.monotonic() - grace, time.monotonic() + 90
                while tracker.live() and time.monotonic() < linger:
                    time.sleep(0.5)
                details["left_gone_after_s"] = (
                    None if tracker.live() else round(time.monotonic() - ended, 1)
                )
        if probe.driver == "sigkill":
            details["reaper_seen"] = [
                f"{pid} {cmd}"[:160] for pid, (_, cmd) in tracker.seen.items() if "reaper" in cmd
            ]
        _kill_group(process.pid)
        tracker.kill_all()
        stdout, stderr = out_path.read_text(errors="replace"), err_path.read_text(errors="replace")
        details["processes_started"] = len(tracker.seen)
        watched = details.pop("watched", {})
        if probe.watch:
            details["watched"] = _watched_from_log(watched, probe, stderr)
        if probe.driver == "listen":
            details["listening"] = sorted(listen.values(), key=lambda r: (r["address"], r["port"]))
            bad = [r for r in listen.values() if not r["loopback"]]
            if not listen:
                failures.append("no listening socket of the run's processes was seen")
            if bad:
                failures.append(
                    "listening beyond loopback: "
                    + ", ".join(f"{r['address']}:{r['port']} ({r['cmd'][:60]})" for r in bad)
                )
        outcome, error = classify_exit(probe, rc, stdout, stderr)
        result.update(rc=rc, seconds=round(seconds, 1))
        result["_stderr"] = stderr
        result["_pdir"] = pdir
        if probe.expected == "ok":
            if probe.check is not None and rc is not None:
                failures.extend(probe.check({**result, "details": details}))
            if outcome == "hang" or rc is None:
                outcome = "hang"
            elif not failures:
                outcome, error = "ok", ""
            elif outcome == "traceback":
                pass
            elif probe.category == "fault":
                outcome = "not_ok"
            elif outcome == "exit_0":
                outcome = "silently_wrong"
            if failures:
                details["failures"] = failures
                if outcome in ("not_ok", "silently_wrong") or not error:
                    error = failures[0]
        elif outcome == "exit_0":
            outcome = "silently_wrong"
            error = error or "exit 0: the bad input was accepted"
            run_dirs = sorted(str(p) for p in (pdir).rglob("summary.json"))
            if run_dirs:
                details["summaries_written"] = run_dirs[:4]
        if outcome == "clear_error":
            details["rc_is_2"] = rc == 2
            details["stderr_lines"] = len(_lines(stderr))
        changed = _victims_changed(pdir)
        if changed:  # a file behind a link in the run folder was written
            details["victims_changed"] = changed
            outcome, error = "silently_wrong", f"written through a link: {changed[0]}"
        if (pdir / PWNED).exists():  # a payload planted in the run folder ran
            outcome, error = "code_executed", f"the planted payload ran ({pdir / PWNED})"
        result.pop("_stderr")
        result.pop("_pdir")
        result.update(outcome=outcome, as_expected=outcome == probe.expected, error=error)
        if not result["as_expected"] or outcome == "traceback":
            details["stderr_head"] = [line[:300] for line in _lines(stderr)[:12]]
            details["stderr_tail"] = [line[:300] for line in _lines(stderr)[-12:]]
            details["stdout_tail"] = [line[:300] for line in _lines(stdout)[-4:]]
        result["details"] = details
        return result

    def _drive(
        self,
        probe: Probe,
        process: subprocess.Popen,
        tracker: Tracker,
        err_path: Path,
        start: float,
        pdir: Path,
        details: dict,
    ) -> tuple[int | None, list[str]]:
        limit = probe.limit()
        failures: list[str] = []
        watched: dict[str, float] = {}
        details["watched"] = watched

        def wait(until: float, pattern: str | None = None) -> bool:
            """Poll until the process exits (False) or ``pattern`` shows on stderr (True)."""
            while time.monotonic() < until:
                text = err_path.read_text(errors="replace")
                for label, regex in probe.watch.items():
                    if label not in watched and re.search(regex, text):
                        watched[label] = round(time.monotonic() - start, 1)
                if pattern is not None and re.search(pattern, text):
                    return True
                if process.poll() is not None:
                    return False
                time.sleep(0.2)
            return False

        end = start + limit
        if probe.driver == "plain" or probe.driver == "listen":
            wait(end)
            return self._finish(process, end, tracker), failures
        if not wait(end, STEP_LINE):
            rc = self._finish(process, end, tracker)
            failures.append(
                "training never started (no 'step N:' line)"
                if rc is not None
                else "no 'step N:' line within the limit"
            )
            return rc, failures
        details["started_training_s"] = round(time.monotonic() - start, 1)
        if probe.driver == "signal":
            time.sleep(1.0)
            tracker.snapshot()
            details["descendants_before_signal"] = len(tracker.live())
            sent = time.monotonic()
            if probe.group_signal:
                os.killpg(process.pid, probe.signum)
            else:
                process.send_signal(probe.signum)
            rc = self._finish(process, min(end, sent + 30), tracker)
            if rc is None:
                failures.append("the run did not exit within 30 s of the signal")
                return None, failures
            details["exit_s_after_signal"] = round(time.monotonic() - sent, 1)
            if rc == 0:
                failures.append("exit status 0 after a signal (a non-zero status is expected)")
            failures.extend(_check_interrupted_run(pdir / "out" / "run", details))
            return rc, failures
        if probe.driver == "sigkill":
            time.sleep(1.0)
            tracker.snapshot()
            details["descendants_before_kill"] = len(tracker.live())
            process.kill()
            return process.wait(), failures
        if probe.driver == "kill_worker":
            return self._kill_worker(process, tracker, end, pdir, details, failures), failures
        raise ValueError(probe.driver)

    def _finish(self, process: subprocess.Popen, until: float, tracker: Tracker) -> int | None:
        """The exit status, or None after killing the probe's processes at ``until``."""
        try:
            return process.wait(timeout=max(0.0, until - time.monotonic()))
        except subprocess.TimeoutExpired:
            tracker.snapshot()
            _kill_group(process.pid)
            tracker.kill_all()
            process.wait()
            return None

    def _kill_worker(
        self,
        process: subprocess.Popen,
        tracker: Tracker,
        end: float,
        pdir: Path,
        details: dict,
        failures: list[str],
    ) -> int | None:
        pid_file = self.ctx.envs / "env_pids.txt"
        target = None
        time.sleep(1.5)  # a few iterations in (a checkpoint every 2)
        tracker.snapshot()
        live = tracker.live()
        details["ray_worker_titles"] = sorted(
            {c.split()[0] for c in live.values() if c.startswith("ray::")}
        )
        details["ray_titles_mentioning_env"] = [
            c for c in live.values() if c.startswith("ray::") and "env" in c.lower()
        ]
        entries = (
            [line.split() for line in pid_file.read_text().splitlines()]
            if pid_file.exists()
            else []
        )
        details["env_builders"] = sorted({f"{p} {f}" for p, f in entries})
        for pid_text, _ in entries:
            pid = int(pid_text)
            if pid != process.pid and pid in live and live[pid].startswith("ray::"):
                target = pid
        if target is None:
            failures.append("no ray:: descendant of the driver built the env: nothing was killed")
            return self._finish(process, end, tracker)
        details["killed"] = f"{target} {live[target]}"
        os.kill(target, signal.SIGKILL)
        rc = self._finish(process, end, tracker)
        if rc is None:
            failures.append("the run did not finish after the worker was killed")
            return None
        if rc != 0:
            failures.append(f"exit status {rc}, not 0")
        summary = pdir / "out" / "run" / "summary.json"
        if summary.exists():
            data = json.loads(summary.read_text())
            details["restarts"] = data.get("restarts")
            details["restart_log"] = data.get("restart_log")
            if not (data.get("restarts") or 0) >= 1:
                failures.append(f"summary.json restarts={data.get('restarts')}, not >= 1")
        else:
            failures.append("no summary.json")
        return rc


def _watched_from_log(watched: dict, probe: Probe, stderr: str) -> dict:
    return {
        label: watched.get(label)
        for label in probe.watch
        if label in watched or re.search(probe.watch[label], stderr)
    }


def _check_interrupted_run(run_dir: Path, details: dict) -> list[str]:
    failures = []
    summary = run_dir / "summary.json"
    if not summary.exists():
        failures.append(f"no summary.json in {run_dir}")
    else:
        data = json.loads(summary.read_text())
        details["summary_interrupted"] = data.get("interrupted")
        if data.get("interrupted") is not True:
            failures.append(f"summary.json interrupted={data.get('interrupted')!r}, not true")
    checkpoints = sorted((run_dir / "checkpoints").glob("*")) if run_dir.exists() else []
    complete = [c.name for c in checkpoints if (c / "manifest.json").exists()]
    details["checkpoints"] = [c.name for c in checkpoints]
    if not complete:
        failures.append("no complete checkpoint (with manifest.json) in the run folder")
    return failures


def _poll_listen(tracker: Tracker, found: dict[tuple, dict]) -> None:
    pids = {tracker.root: "driver", **tracker.live()}
    for socket in listening(set(pids)):
        found.setdefault(
            (socket.address, socket.port, socket.pid),
            {
                "address": socket.address,
                "port": socket.port,
                "pid": socket.pid,
                "cmd": pids[socket.pid][:120],
                "loopback": socket.loopback,
            },
        )


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pgid, signal.SIGKILL)


# ---------------------------------------------------------------------------------------------


def prepare(ctx: Ctx) -> None:
    """Files the probes read, a check that the children import this checkout's rlcore, and the
    warmed tiny model (built once into ctx.cache)."""
    _write(ctx.envs / "probe_envs.py", ENVS_PY)
    _write(ctx.rewards / "rewards.py", REWARDS_PY)
    (ctx.rewards / "one_timeout.flag").unlink(missing_ok=True)
    where = subprocess.run(
        [ctx.python, "-c", "import rlcore; print(rlcore.__file__)"],
        cwd=ROOT,
        env=ctx.env(),
        capture_output=True,
        text=True,
        check=True,
    )
    imported = Path(where.stdout.strip()).resolve()
    if imported != ROOT / "rlcore" / "__init__.py":
        sys.exit(f"probes: the children import {imported}, not this checkout's rlcore")
    print(f"probes: rlcore under test: {imported}", file=sys.stderr)
    summary = ctx.run_quiet(
        Probe("warm", "setup", "ok", "reasoning"), ctx.work / "_warm", "tiny model warm-up"
    )
    ctx.tiny_model = Path(summary["model"])
    print(f"probes: tiny model: {ctx.tiny_model}", file=sys.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", help="run the probes whose name matches this regex")
    parser.add_argument(
        "--skip-long",
        action="store_true",
        help="skip env_step_blocks_apart_default_deadline (up to 360 s)",
    )
    parser.add_argument("--list", action="store_true", help="list the probes and exit")
    parser.add_argument("--work", type=Path, help="work folder (default: a new one in /tmp)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter of the runs")
    args = parser.parse_args()
    selected = [p for p in probes() if not args.only or re.search(args.only, p.name)]
    if args.skip_long:
        selected = [p for p in selected if (p.timeout or 0) <= 120]
    if args.list:
        for p in selected:
            print(
                json.dumps(
                    {
                        "name": p.name,
                        "category": p.category,
                        "expected": p.expected,
                        "entry": p.entry,
                        "overrides": p.overrides,
                        "args": p.args,
                    }
                )
            )
        return 0
    work = args.work or Path(tempfile.mkdtemp(prefix="rlcore-probes-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"probes: work folder {work}", file=sys.stderr)
    ctx = Ctx(work, args.python)
    prepare(ctx)
    started = time.monotonic()
    results = []
    runner = Runner(ctx)
    for number, probe in enumerate(selected, 1):
        print(f"probes: [{number}/{len(selected)}] {probe.name}", file=sys.stderr, flush=True)
        result = runner.run(probe)
        results.append(result)
        print(json.dumps(result), flush=True)
        print(
            f"probes:   -> {result['outcome']} ({result['seconds']} s)"
            f"{'' if result['as_expected'] else '  [NOT AS EXPECTED]'}",
            file=sys.stderr,
            flush=True,
        )
    print(json.dumps(summarise(results, time.monotonic() - started)), flush=True)
    return 0


def summarise(results: list[dict], seconds: float) -> dict:
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in results:
        counts[r["category"]][r["outcome"]] += 1
    by_name = {r["name"]: r for r in results}
    mismatch = []
    for r in results:
        own = by_name.get(r.get("pair") or "")
        if r["category"] != "dry_run" or own is None:
            continue
        run_refused = own["outcome"] in ("clear_error", "unclear_error", "traceback")
        dry_refused = r["outcome"] in ("clear_error", "unclear_error", "traceback")
        if run_refused != dry_refused:
            mismatch.append({"probe": own["name"], "run": own["outcome"], "dry_run": r["outcome"]})
    return {
        "summary": True,
        "probes": len(results),
        "seconds": round(seconds, 1),
        "counts": {c: dict(o) for c, o in counts.items()},
        "as_expected": sum(r["as_expected"] for r in results),
        "not_as_expected": [
            f"{r['name']}: {r['outcome']}" for r in results if not r["as_expected"]
        ],
        "dry_run_disagrees_with_run": mismatch,
        "clear_errors_without_status_2": [
            r["name"]
            for r in results
            if r["outcome"] == "clear_error" and not r["details"].get("rc_is_2")
        ],
    }


if __name__ == "__main__":
    sys.exit(main())
