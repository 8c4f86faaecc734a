"""Same results (issue 49's acceptance): the shipped default jobs, a few iterations each, run on
one commit and again on another, their outcomes compared bit for bit.

    python benchmarks/same_results.py --record FILE    # on the commit before
    python benchmarks/same_results.py --compare FILE   # on the commit after: a JSON line per job,
                                                       # exit status 1 when any job differs
    python benchmarks/same_results.py --diff A B       # two records, without running anything

A job's outcome is what its run leaves in its folder, less what measures time or names a place:
- summary.json without ``VOLATILE_SUMMARY`` (wall-clock, throughput and stage seconds, the run
  folder); the tiny model's folder by its name (``tiny-<hash of its recipe>``), not its path;
- the last checkpoint: each file its manifest.json lists, by sha256 and by content (every
  tensor's dtype, shape and bytes, every value), so that a difference names the tensor;
  driver.json by content only, less ``VOLATILE_DRIVER`` (its bytes carry the run's timings);
- the metrics of every iteration as written to tensorboard, less the timings and rates and
  each event's wall time;
- the validation generations (validation/*.jsonl) and the files of a reasoning job's tiny model
  (cached under warmup.cache_dir, or built by the job), by sha256.

Two runs of every job on one commit (a020f9d, run at once on a 2-core CPU shared with other
work, their wall times 1.1-2x apart) gave equal outcomes, every checkpoint file byte for byte and
the asynchronous job's staleness included, so nothing above is compared with a tolerance; only
what measures time or names a place is left out. Besides ``time/*``, ``perf/busy/*`` and
``*_per_s``, the metrics left out are ``VOLATILE_METRICS``; ``reward/timeouts`` and
``tools/timeouts`` are kept (0 unless a reward or a tool call runs past its limit: a difference
there is a slow machine, not the code).

The default jobs read the tiny arithmetic model cached under .cache/rlcore, as the shipped job
does (the first run that misses it builds it: about 4 minutes on 2 idle cores). ``tools_grpo``
and ``warmup_fresh`` build their models in the run's own folder with a short warm-up, so that the
tokenizer, the model's initialisation and both warm-ups (with tools, and with the accuracy check)
are compared on every run. A job that fails is recorded with its error, and differs.

Cost: about 240 s of CPU for the six jobs (a020f9d's record: same_results_a020f9d.json), 25
minutes of wall time when it was recorded, on 2 cores loaded 15 to 30 deep by other work (most
of it tools_grpo's multi-turn generation). ``--jobs`` runs a subset.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# summary.json keys that measure time or name a place: they differ between any two runs.
VOLATILE_SUMMARY = (
    "wall_s",
    "sps",
    "train_sps",
    "time_to_threshold_s",
    "tokens_per_s",
    "seconds_per_stage",
    "busy_share",
    "run_dir",
)
# driver.json (the checkpoint's run state): the clock readings, the output and cache folders.
VOLATILE_DRIVER = (
    "progress.elapsed_s",
    "progress.train_s",
    "progress.reached_s",
    "config.runner.output_dir",
    "config.warmup.cache_dir",
)
# tensorboard tags that are timings or rates (and ``time/*``, ``perf/busy/*``, ``*_per_s``)
VOLATILE_METRICS = ("tools/seconds", "tools/time_share")
SHOWN = 20  # differences listed per job; the rest are counted


@dataclass(frozen=True)
class Job:
    """One shipped config, cut to a few iterations with a checkpoint at the end; ``{cache}`` in
    an override is a model cache in the run's temporary folder, shared by its jobs."""

    script: str
    config: str | None
    overrides: tuple[str, ...]


JOBS = {
    # 20 iterations of 64 envs x 8 steps, evaluated at 10 and 20 (the learning rate decays over
    # these 10,240 steps, as the shipped job's over its 100,000)
    "cartpole": Job(
        "examples/embodied/main.py",
        None,
        ("runner.total_env_steps=10240", "runner.checkpoint_every=20"),
    ),
    # 4 iterations of 16 envs x 32 steps, evaluated at 2 and 4 on 16 episodes (64 shipped)
    "lm_policy_reach": Job(
        "examples/embodied/main.py",
        "embodied/lm_policy_reach_ppo",
        (
            "runner.total_env_steps=2048",
            "runner.eval_every=2",
            "runner.eval_episodes=16",
            "runner.checkpoint_every=4",
        ),
    ),
    # validated before and after on the 200 prompts, as shipped
    "reasoning_ppo": Job(
        "examples/reasoning/main.py",
        None,
        ("runner.total_iterations=3", "runner.checkpoint_every=3"),
    ),
    "reasoning_async": Job(
        "examples/reasoning/main.py",
        "reasoning/tiny_arith_ppo_async",
        ("runner.total_iterations=4", "runner.checkpoint_every=4"),
    ),
    # a tiny model built here for the tools (40 warm-up steps: most of its calls are still
    # malformed, some reach the calculator), validated on 32 prompts
    "tools_grpo": Job(
        "examples/reasoning/main.py",
        "reasoning/tiny_calc_tools_grpo",
        (
            "warmup.cache_dir={cache}",
            "warmup.steps=40",
            "data.synthetic.num_val=32",
            "runner.total_iterations=2",
            "runner.checkpoint_every=2",
        ),
    ),
    # the default job from a model built here: tokenizer, initialisation, 25 warm-up steps and
    # the accuracy check that would stop them, then one PPO iteration
    "warmup_fresh": Job(
        "examples/reasoning/main.py",
        None,
        (
            "warmup.cache_dir={cache}",
            "warmup.steps=25",
            "warmup.check_every=25",
            "runner.total_iterations=1",
            "runner.checkpoint_every=1",
        ),
    ),
}


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _tensor(value: Any) -> str:
    """A tensor as its dtype, shape and the sha256 of its bytes (bit-exact, bf16 included)."""
    flat = value.detach().cpu().contiguous().reshape(-1)
    raw = flat.view(__import__("torch").uint8).numpy().tobytes() if flat.numel() else b""
    return (
        f"tensor {str(value.dtype).removeprefix('torch.')} {list(value.shape)} "
        + (hashlib.sha256(raw).hexdigest()[:20])
    )


def flatten(value: Any, path: str = "", out: dict[str, Any] | None = None) -> dict[str, Any]:
    """``value`` (nested dicts, lists, tensors, scalars) as ``{dotted path: leaf}``; a tensor or
    an array by its digest (``_tensor``), a list of more than 8 scalars by its length and
    digest."""
    import numpy as np
    import torch

    out = {} if out is None else out
    if isinstance(value, dict):
        for key, item in value.items():
            flatten(item, f"{path}.{key}" if path else str(key), out)
    elif isinstance(value, (list, tuple)):
        scalars = all(isinstance(v, (int, float, str, bool, type(None))) for v in value)
        if scalars and len(value) <= 8:
            out[path] = list(value)
        elif scalars:
            text = json.dumps(list(value)).encode()
            out[path] = f"list[{len(value)}] {hashlib.sha256(text).hexdigest()[:20]}"
        else:
            for i, item in enumerate(value):
                flatten(item, f"{path}[{i}]", out)
    elif isinstance(value, torch.Tensor):
        out[path] = _tensor(value)
    elif isinstance(value, np.ndarray):
        out[path] = _tensor(torch.from_numpy(np.ascontiguousarray(value)))
    elif isinstance(value, (int, float, str, bool, type(None))):
        out[path] = value
    else:  # numpy scalars and the like: their repr is exact
        out[path] = repr(value)
    return out


def _checkpoint(folder: Path) -> dict[str, Any]:
    """Each file of the checkpoint ``folder`` as its manifest lists it: sha256 and content."""
    import safetensors.torch
    import torch

    files = json.loads((folder / "manifest.json").read_text())["files"]
    out = {}
    for rel, listed in sorted(files.items()):
        path = folder / rel
        if sha256(path) != listed["sha256"]:
            raise RuntimeError(f"{path}: its sha256 is not the manifest's")
        entry: dict[str, Any] = {"sha256": listed["sha256"]}
        if rel.endswith(".pt"):
            entry["content"] = flatten(torch.load(path, map_location="cpu", weights_only=True))
        elif rel.endswith(".safetensors"):
            entry["content"] = flatten(safetensors.torch.load_file(path))
        elif rel.endswith(".json"):
            content = flatten(json.loads(path.read_text()))
            if rel == "driver.json":
                entry.pop("sha256")  # its bytes carry the timings
                content = {k: v for k, v in content.items() if k not in VOLATILE_DRIVER}
            entry["content"] = content
        out[rel] = entry
    return out


def _metrics(folder: Path) -> dict[str, list[list[float]]]:
    """The tensorboard scalars of every iteration, ``{tag: [[step, value], ...]}``, less the
    timings and rates."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = sorted(folder.glob("events.out.tfevents.*"))
    if len(events) != 1:
        raise RuntimeError(f"{folder}: {len(events)} event files; expected one")
    reader = EventAccumulator(str(events[0]), size_guidance={"scalars": 0})
    reader.Reload()
    return {
        tag: [[e.step, e.value] for e in reader.Scalars(tag)]
        for tag in sorted(reader.Tags()["scalars"])
        if not tag.startswith(("time/", "perf/busy/"))
        and not tag.endswith("_per_s")
        and tag not in VOLATILE_METRICS
    }


def outcome(run_dir: Path) -> dict[str, Any]:
    """What the run in ``run_dir`` computed (module docstring), as plain JSON."""
    summary = json.loads((run_dir / "summary.json").read_text())
    model = summary.get("model")
    for key in VOLATILE_SUMMARY:
        summary.pop(key, None)
    out: dict[str, Any] = {}
    if model is not None:
        summary["model"] = Path(model).name
        folder = ROOT / model  # relative to the job's working directory, the repository
        out["model"] = {p.name: sha256(p) for p in sorted(folder.iterdir()) if p.is_file()}
    out["summary"] = summary
    checkpoints = sorted((run_dir / "checkpoints").glob("iter_*"))
    if not checkpoints:
        raise RuntimeError(f"{run_dir}: no checkpoint")
    out["checkpoint"] = {"name": checkpoints[-1].name, "files": _checkpoint(checkpoints[-1])}
    out["metrics"] = _metrics(run_dir / "tensorboard")
    out["validation"] = {
        p.name: sha256(p) for p in sorted((run_dir / "validation").glob("*.jsonl"))
    }
    return out


def run_job(name: str, job: Job, scratch: Path) -> dict[str, Any]:
    """Run ``job`` in ``scratch``/``name``; its command, seconds and outcome (or its error)."""
    folder = scratch / name
    folder.mkdir(parents=True)
    overrides = [o.format(cache=scratch / "cache") for o in job.overrides]
    command = [job.script, *(["--config", job.config] if job.config else []), *overrides]
    common = [f"runner.output_dir={folder}", "runner.run_name=run", "runner.progress=false"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *command, *common],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    record: dict[str, Any] = {"command": command, "seconds": round(time.perf_counter() - start, 1)}
    if done.returncode != 0:
        record["error"] = f"exit status {done.returncode}: {done.stderr[-2000:]}"
    else:
        record["outcome"] = outcome(folder / "run")
    return record


def run_all(names: list[str], keep: Path | None) -> dict[str, Any]:
    import torch

    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    jobs = {}
    with tempfile.TemporaryDirectory(prefix="same_results_") as tmp:
        scratch = keep if keep is not None else Path(tmp)
        for name in names:
            jobs[name] = run_job(name, JOBS[name], scratch)
            print(f"{name}: {jobs[name]['seconds']} s", file=sys.stderr, flush=True)
    return {"commit": commit, "torch": torch.__version__, "jobs": jobs}


def _leaves(record: dict[str, Any]) -> dict[str, Any]:
    if "error" in record:
        return {"error": record["error"]}
    return flatten(record["outcome"])


def _same(a: Any, b: Any) -> bool:
    """Equal, floats exactly (their shortest repr), NaN equal to NaN, 1 not 1.0 nor true."""
    return json.dumps(a) == json.dumps(b)


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Every leaf of two job records that differs, as ``path: before -> after``."""
    a, b = _leaves(before), _leaves(after)
    out = []
    for key in sorted(a.keys() | b.keys()):
        if key not in b:
            out.append(f"{key}: only before ({a[key]!r:.120})")
        elif key not in a:
            out.append(f"{key}: only after ({b[key]!r:.120})")
        elif not _same(a[key], b[key]):
            out.append(f"{key}: {a[key]!r:.120} -> {b[key]!r:.120}")
    return out


def report(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """A JSON line per job of ``after``; whether every job equals its record in ``before``."""
    equal = True
    for name, record in after["jobs"].items():
        if name not in before["jobs"]:
            found = [f"{name}: not in the record"]
        else:
            found = differences(before["jobs"][name], record)
        shown = found[:SHOWN] + (
            [f"... and {len(found) - SHOWN} more"] if len(found) > SHOWN else []
        )
        print(json.dumps({"job": name, "equal": not found, "differences": shown}), flush=True)
        equal = equal and not found
    return equal


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--record", type=Path, metavar="FILE", help="run the jobs, write FILE")
    mode.add_argument("--compare", type=Path, metavar="FILE", help="run the jobs, compare")
    mode.add_argument("--diff", type=Path, nargs=2, metavar="FILE", help="compare two records")
    parser.add_argument("--jobs", nargs="+", choices=list(JOBS), help="default: all")
    parser.add_argument("--keep", type=Path, help="run the jobs in this folder and keep it")
    parser.add_argument("--save", type=Path, help="with --compare: also write this run's record")
    args = parser.parse_args()
    if args.diff:
        before, after = (json.loads(p.read_text()) for p in args.diff)
        return 0 if report(before, after) else 1
    before = json.loads(args.compare.read_text()) if args.compare else None
    names = args.jobs or (list(before["jobs"]) if before else list(JOBS))
    start = time.perf_counter()
    record = run_all(names, args.keep)
    print(f"all jobs: {time.perf_counter() - start:.0f} s", file=sys.stderr)
    if args.record or args.save:
        (args.record or args.save).write_text(json.dumps(record, indent=1) + "\n")
    if before is None:
        failed = [name for name, job in record["jobs"].items() if "error" in job]
        for name in failed:
            print(f"{name}: {record['jobs'][name]['error']}", file=sys.stderr)
        return 1 if failed else 0
    return 0 if report(before, record) else 1


if __name__ == "__main__":
    sys.exit(main())
