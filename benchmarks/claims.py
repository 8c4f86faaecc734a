"""Rerun the run figures the docs state (the ledger, benchmarks/claims.yaml) and say which hold.

    .venv/bin/python benchmarks/claims.py --list
    .venv/bin/python benchmarks/claims.py --cost seconds      # a few minutes in all
    .venv/bin/python benchmarks/claims.py --name cartpole-make-run [--name ...]
    .venv/bin/python benchmarks/claims.py --all               # every CPU class: hours

Each selected claim's command runs once per seed, the claims alternated seed by seed (seed 1 of
every claim, then seed 2 of every claim that has one, ...) so that all see the same machine
load; claims that read one benchmark's output (the same command and seed) share one run. In a
command, ``{python}`` is this interpreter, ``{seed}`` the seed and ``{out}`` a temporary folder
for the run's outputs. A run's figures are read from its last JSON line on
stdout (matching the claim's ``select``: the summary an entry point prints, or a benchmark's
median line), each check's ``metric`` a dotted key path in it; the median over the seeds is
compared with the stated value. Then a table, and one JSON line per claim:
``{"name", "expected", "measured", "held", "seeds"}`` (``measured``: per check, the value of
each seed; ``held``: every check's median within its tolerance, or null when a run failed).
The first line of stdout is the machine (``{"machine": ...}``: CPUs, model, vector instruction
sets, torch): a run's accuracies move with the CPU's floating point and its seconds with its
speed, so a figure measured on another machine can drift for that reason alone. Claims with
``rerun: false`` (figures of an earlier tree, of another project's baseline) are
listed, never run; ``gpu`` claims run only when named by ``--cost gpu`` or ``--name``.

A speed (seconds, a rate) holds only on the machine it was measured on (the claim's ``machine``,
one of the ledger's ``machines``): elsewhere its check says "other machine" and leaves the
verdict to the claim's other checks (``held`` null when it has none).

A whole ``--all`` takes hours, more than one sitting: ``--log FILE`` appends one JSON line per
run (claim, seed, figures, machine, commit, command, the configs it read, its seconds), and
``--resume FILE`` takes a run from it instead of running it again when it ran the same command
at a commit whose code is the working tree's: the package, the examples, the scripts the
command runs and the configs it read (``code_paths``; the configs are found as the run reads
them, by an audit hook in each of its Python processes, ``benchmarks/claims_reads/
sitecustomize.py``; a run logged before that is bound to every config), comment lines and the
docs aside. A run of another machine counts too (an accuracy is judged everywhere), except for a
claim whose speed this machine judges: that one runs here. The sittings' log is
``benchmarks/claims_runs.jsonl`` (``RUNS``), committed with the repository, so that what one
sitting ran counts in the next on whatever machine it gets, and ``--status`` reads it without
running anything: per claim, held / drifted / unjudged (a speed of another machine only) /
partial (some seeds logged) / none.

    .venv/bin/python benchmarks/claims.py --all --log benchmarks/claims_runs.jsonl \
        --resume benchmarks/claims_runs.jsonl
    .venv/bin/python benchmarks/claims.py --status
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from claims_ledger import ROOT, Claim, load

# the log of the sittings that ran the ledger, kept with the repository (``--status`` reads it)
RUNS = ROOT / "benchmarks" / "claims_runs.jsonl"
TIMEOUT_S = {"seconds": 600, "minutes": 3600, "hour": 4 * 3600, "gpu": 4 * 3600}
# what every run's figures depend on; with the scripts its command names (``code_paths``), a
# logged run counts again while none of it changed (the docs and comment lines aside)
CODE_PATHS = ("rlcore", "configs", "examples", "pyproject.toml")
# the folder whose sitecustomize.py records the configs/ files a run's processes open
READS_HOOK = Path(__file__).resolve().parent / "claims_reads"
NOT_CODE = (":(exclude,glob)**/*.md",)
_SCRIPT = re.compile(r"(?:benchmarks|tests|examples)/[\w/]+\.py")
_IMPORT = re.compile(r"^\s*(?:from|import)\s+(\w+)", re.M)


def code_paths(
    command: tuple[str, ...] | list[str], configs: list[str] | None = None
) -> tuple[str, ...]:
    """``CODE_PATHS`` and the scripts ``command`` runs: each ``.py`` path it names, and the
    modules of ``benchmarks/`` those import, and theirs (``from embodied import ...``); with
    ``configs`` (the files under configs/ a run read, as its log line says), those files in
    place of the whole folder."""
    found: list[str] = []
    todo = [m for arg in command for m in _SCRIPT.findall(arg)]
    while todo:
        path = todo.pop()
        if path in found or not (ROOT / path).is_file():
            continue
        found.append(path)
        for name in _IMPORT.findall((ROOT / path).read_text()):
            if (ROOT / "benchmarks" / f"{name}.py").is_file():
                todo.append(f"benchmarks/{name}.py")
    base = CODE_PATHS
    if configs is not None:
        base = tuple(p for p in CODE_PATHS if p != "configs") + tuple(
            f"configs/{name}" for name in sorted(set(configs))
        )
    return base + tuple(sorted(found))


def last_json(stdout: str, select: dict) -> dict | None:
    """The last line of ``stdout`` that is a JSON object holding every ``select`` item."""
    for line in reversed(stdout.splitlines()):
        if not line.startswith("{"):
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and all(row.get(k) == v for k, v in select.items()):
            return row
    return None


def read_metric(row: dict, path: str) -> float | None:
    """The number at ``path`` in ``row``: keys and list indices joined by dots
    (``curve.-1.2``: the last validation's accuracy); None where there is none."""
    value = row
    for part in path.split("."):
        if (
            isinstance(value, list)
            and part.lstrip("-").isdigit()
            and -len(value) <= int(part) < len(value)
        ):
            value = value[int(part)]
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            return None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok else None


def fill(arg: str, **values: str) -> str:
    """``arg`` with each ``{name}`` replaced; other braces (Hydra's ``env.kwargs={a:1}``) kept."""
    for name, value in values.items():
        arg = arg.replace("{" + name + "}", value)
    return arg


def run_env(record: Path) -> dict[str, str]:
    """The environment of a run: the repository importable, and the hook that writes to
    ``record`` each file under configs/ that any of the run's Python processes opens."""
    path = (str(READS_HOOK), str(ROOT), os.environ.get("PYTHONPATH"))
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in path if p),
        "RLCORE_CLAIMS_CONFIGS": str(ROOT / "configs"),
        "RLCORE_CLAIMS_READS": str(record),
    }


def read_configs(record: Path) -> list[str]:
    """The configs/ files a run read (``run_env``'s record), each once, sorted."""
    return sorted(set(record.read_text().splitlines())) if record.exists() else []


def run_command(claim: Claim, seed: int, cache: dict) -> tuple[str, str, list[str]]:
    """The stdout of ``claim``'s command on ``seed``, an error line ('' if none) and the
    configs/ files it read; a command that several claims share (their figures read from one
    benchmark's output) runs once."""
    key = (claim.command, seed)
    if key in cache:
        return cache[key]
    with (
        tempfile.TemporaryDirectory(prefix="claims-") as out,
        tempfile.TemporaryDirectory(prefix="claims-reads-") as reads,
    ):
        record = Path(reads) / "read.txt"
        argv = [fill(a, python=sys.executable, seed=str(seed), out=out) for a in claim.command]
        try:
            done = subprocess.run(
                argv,
                cwd=ROOT,
                env=run_env(record),
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S[claim.cost],
            )
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            cache[key] = (
                done.stdout,
                "" if done.returncode == 0 else f"exit {done.returncode}: {tail}",
                read_configs(record),
            )
        except subprocess.TimeoutExpired:
            cache[key] = "", f"timed out after {TIMEOUT_S[claim.cost]} s", read_configs(record)
    return cache[key]


def figures(claim: Claim, stdout: str) -> tuple[list[float | None], str]:
    """Each check's value in the run's output; and an error line, or ''."""
    row = last_json(stdout, claim.select)
    if row is None:
        return [None] * len(claim.checks), f"no JSON line with {claim.select} on stdout"
    values = [read_metric(row, check.metric) for check in claim.checks]
    missing = [c.metric for c, v in zip(claim.checks, values, strict=True) if v is None]
    return values, f"no figure at {', '.join(missing)} in the JSON line" if missing else ""


def judged(claim: Claim, where: str | list[str | None] | None) -> list[bool]:
    """Per check: whether it is judged on runs of ``where`` (a machine's name, or one per run):
    a speed only when every run was on the claim's own machine (never for a claim measured
    before the ledger named machines); any other figure everywhere."""
    machines = where if isinstance(where, list) else [where]
    on_its_own = claim.machine is not None and all(m == claim.machine for m in machines)
    return [not c.machine_bound or on_its_own for c in claim.checks]


def verdict(
    claim: Claim, measured: list[list[float | None]], where: str | list[str | None] | None
) -> bool | None:
    """Every judged check's median over the seeds holds; None where a run gave no figure or
    no check is judged on the runs' machines (``where``, as for ``judged``)."""
    if any(v is None for values in measured for v in values):
        return None
    pairs = [
        (check, values)
        for check, values, judge in zip(claim.checks, measured, judged(claim, where), strict=True)
        if judge
    ]
    if not pairs:
        return None
    return all(check.holds(statistics.median(values)) for check, values in pairs)


def head_commit() -> str:
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip()


def same_code(commit: str, paths: tuple[str, ...], known: dict) -> bool:
    """``paths`` at ``commit`` are the working tree's (the docs and comment lines aside)."""
    if (commit, paths) not in known:
        done = subprocess.run(
            # (a change of comment lines alone, '#', changes no run)
            ["git", "diff", "--quiet", "-I", r"^\s*#", commit, "--", *paths, *NOT_CODE],
            cwd=ROOT,
            capture_output=True,
        )
        known[commit, paths] = done.returncode == 0
    return known[commit, paths]


# what a ``--log`` line holds (``main`` writes them; and ``configs``, the configs/ files the run
# read, since the hook recorded them: without it, the run depends on every config)
RUN_KEYS = frozenset({"name", "seed", "values", "error", "machine", "commit", "command"})


def logged_runs(path: Path, here: dict) -> dict:
    """The runs of ``path`` (a ``--log`` file) at the working tree's code: (name, seed) -> its
    row, the latest run of this machine (``here``) where there is one, else the latest of any
    other. A line that is no run of this script (another benchmark's output appended to the
    file, a line cut short by a crash) is skipped, and the count of such lines said on stderr;
    a run that failed (``error``) never counts."""
    runs, known, foreign = {}, {}, 0
    if not path.exists():
        return runs
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            row = None
        if not isinstance(row, dict) or not row.keys() >= RUN_KEYS:
            foreign += 1
            continue
        if row["error"]:
            continue
        key = row["name"], row["seed"]
        if key in runs and runs[key]["machine"] == here and row["machine"] != here:
            continue  # this machine's run before another's
        if same_code(row["commit"], code_paths(row["command"], row.get("configs")), known):
            runs[key] = row
    if foreign:
        print(f"{path}: {foreign} line(s) that are no run of claims.py, skipped", file=sys.stderr)
    return runs


def counts_here(claim: Claim, row: dict, here: dict, here_name: str | None) -> bool:
    """A logged run stands for a run now: the claim's command, and this machine's run where the
    claim's speed is judged here (elsewhere another machine's accuracy is as good as one here)."""
    if row["command"] != list(claim.command):
        return False
    speed_here = claim.machine is not None and claim.machine == here_name
    return row["machine"] == here or not (speed_here and any(c.machine_bound for c in claim.checks))


def status(ledger, path: Path, here: dict) -> dict[str, int]:
    """Each rerunnable claim's state in the log ``path`` at the working tree's code, without
    running anything: held / drifted (every seed logged; the medians judged as a run would),
    unjudged (every seed logged, no check judged on their machines), partial (some seeds) or
    none; a line per claim, then the counts (returned)."""
    here_name = ledger.machine_named(here)
    runs = logged_runs(path, here)
    counts: dict[str, int] = {}
    for claim in (c for c in ledger.claims if c.rerun):
        rows = [runs.get((claim.name, seed)) for seed in claim.seeds]
        rows = [r if r and counts_here(claim, r, here, here_name) else None for r in rows]
        have = [r for r in rows if r]
        machines = [ledger.machine_named(r["machine"]) for r in have]  # None: unnamed
        if len(have) == len(rows):
            measured = [list(column) for column in zip(*(r["values"] for r in have), strict=True)]
            held = verdict(claim, measured, machines)
            state = {True: "held", False: "drifted", None: "unjudged"}[held]
        else:
            state = "partial" if have else "none"
        counts[state] = counts.get(state, 0) + 1
        shown = "; ".join(
            f"seed {r['seed']}: " + " / ".join("-" if v is None else f"{v:g}" for v in r["values"])
            for r in have
        )
        on = f" [{', '.join(sorted({m or 'unnamed' for m in machines}))}]" if have else ""
        print(f"{claim.name:40} {claim.cost:8} {state:9} {len(have)}/{len(rows)}  {shown}{on}")
    print(json.dumps({"log": str(path), "machine": here_name, **counts}))
    return counts


def selected(args: argparse.Namespace, claims: tuple[Claim, ...]) -> list[Claim]:
    if args.name:
        return [next(c for c in claims if c.name == n) for n in args.name]
    costs = {args.cost} if args.cost else {"seconds", "minutes", "hour"}
    return [c for c in claims if c.rerun and c.cost in costs]


def list_claims(claims: tuple[Claim, ...]) -> None:
    for c in claims:
        state = "drifted" if c.drifted else ("rerun" if c.rerun else "record")
        figures = ", ".join(f"{k.metric} {k.op} {k.expected}" for k in c.checks)
        print(f"{c.name:40} {c.cost:8} {state:8} {c.where[0][0]}  {figures or c.why}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--list", action="store_true", help="list the ledger and exit")
    parser.add_argument("--cost", choices=("seconds", "minutes", "hour", "gpu"))
    parser.add_argument("--name", action="append", help="a claim by name (repeatable)")
    parser.add_argument("--all", action="store_true", help="every CPU claim (hours)")
    parser.add_argument(
        "--log", type=Path, help="append each run's figures to this JSON-lines file"
    )
    parser.add_argument(
        "--resume", type=Path, help="take a run from this --log file where it still counts"
    )
    parser.add_argument(
        "--status",
        nargs="?",
        const=RUNS,
        type=Path,
        metavar="LOG",
        help=f"each claim's state in a --log file (default {RUNS.relative_to(ROOT)}); runs nothing",
    )
    args = parser.parse_args()
    ledger = load()
    if args.list:
        list_claims(ledger.claims)
        return
    if args.status:
        from rlcore.runners.profiling import machine

        status(ledger, args.status, machine())
        return
    if not (args.all or args.cost or args.name):
        parser.error("say which claims: --cost CLASS, --name NAME or --all (--list lists them)")
    known = {c.name for c in ledger.claims}
    if unknown := [n for n in args.name or () if n not in known]:
        parser.error(f"no claim named {', '.join(unknown)}; --list lists them")
    claims = selected(args, ledger.claims)
    if any(not c.rerun for c in claims):
        parser.error(f"not rerunnable: {', '.join(c.name for c in claims if not c.rerun)}")
    # the machine first: accuracies of a run move with the CPU's floating point, seconds with its
    # speed (a figure measured on another machine may not hold here for that reason alone)
    from rlcore.runners.profiling import machine

    here = machine()
    here_name = ledger.machine_named(here)
    print(json.dumps({"machine": here, "named": here_name}), flush=True)
    reused = logged_runs(args.resume, here) if args.resume else {}
    commit = head_commit()
    measured = {c.name: [[] for _ in c.checks] for c in claims}
    run_on: dict[str, list[str | None]] = {c.name: [] for c in claims}  # each run's machine
    outputs: dict = {}
    for round_ in range(max((len(c.seeds) for c in claims), default=0)):
        for claim in (c for c in claims if round_ < len(c.seeds)):
            seed, started = claim.seeds[round_], time.monotonic()
            row = reused.get((claim.name, seed))
            if row is not None and counts_here(claim, row, here, here_name):
                values, error, how = row["values"], "", f"from {args.resume} ({row['commit'][:7]})"
                run_on[claim.name].append(ledger.machine_named(row["machine"]))
                if row["machine"] != here:
                    how += f" on {run_on[claim.name][-1] or 'an unnamed machine'}"
            else:
                run_on[claim.name].append(here_name)
                stdout, error, configs = run_command(claim, seed, outputs)
                values, unread = figures(claim, stdout)
                error = error or unread
                how = f"in {time.monotonic() - started:.0f} s"
                if args.log:
                    entry = {
                        "name": claim.name,
                        "seed": seed,
                        "values": values,
                        "error": error,
                        "machine": here,
                        "commit": commit,
                        "command": list(claim.command),
                        "configs": configs,
                        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                        "run_s": round(time.monotonic() - started, 1),
                    }
                    with args.log.open("a") as log:
                        log.write(json.dumps(entry) + "\n")
            for column, value in zip(measured[claim.name], values, strict=True):
                column.append(value)
            note = f" ({error})" if error else ""
            print(
                f"claims: {claim.name} seed {seed}: {values} {how}{note}",
                file=sys.stderr,
                flush=True,
            )
    rows = []
    for claim in claims:
        held = verdict(claim, measured[claim.name], run_on[claim.name])
        for check, values, judge in zip(
            claim.checks, measured[claim.name], judged(claim, run_on[claim.name]), strict=True
        ):
            shown = " / ".join("-" if v is None else f"{v:g}" for v in values)
            ok = None if None in values else check.holds(statistics.median(values))
            word = {True: "held", False: "drifted", None: "failed"}[ok]
            if not judge and ok is not None:
                word = f"other machine ({'inside' if ok else 'outside'} the band, not judged)"
            print(f"{claim.name:40} {check.metric:28} {check.expected:>10g} {shown:>24}  {word}")
        rows.append(
            {
                "name": claim.name,
                "expected": [c.expected for c in claim.checks],
                "measured": measured[claim.name],
                "held": held,
                "seeds": list(claim.seeds),
                "machine": claim.machine,
            }
        )
    for row in rows:
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
