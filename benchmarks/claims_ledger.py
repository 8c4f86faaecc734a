"""The ledger of run figures the docs state (benchmarks/claims.yaml): loading it, and finding the
lines of the docs that state a figure no entry covers (issue 55). Text scanning only:
tests/test_claims_ledger.py runs it in well under a second.

Scanned prose (``prose_lines``): README.md and docs/*.md whole; the docstrings and comments of
examples/**/*.py; the comments of configs/**/*.yaml (the text after ``#``, marker dropped).

A line states a run figure (``states_a_figure``) when, with inline code spans (```...```)
removed, it holds
- a *figure*: a decimal (``0.495``, ``-22.9``; not a version such as ``1.2.0``), a percentage
  (``85%``), a multiplier (``1.6x``), a count with a k/M suffix (``41k``, ``1.5M``), a number
  with thousands separators (``30,720``), a negative integer (``-33``), integers side by side
  (``1802 / 1640 / 1789``, ``500 -> 11``), or an approximate one (``about 5``, ``~200``); and
- an *outcome word*: accuracy, return, eval, success, reach, solved, steps/s, tokens/s,
  samples/s, faster, slower, speed, ratio, median, seed(s), measured, points, throughput,
  reward, score, "ends at", wall, took, or a duration ("in 15 s", "in 4.7 min").
In a Markdown table the header row counts as part of each row's line, so a row of bare figures
under an "accuracy" column is caught. A config value in backticks (```clip_ratio: 0.2```) is no
figure; a figure outside backticks on a line that also names an outcome is, even when it is a
setting ("lr 3e-4" is not a figure: exponents are not matched; "gamma 0.8" beside "success" is):
such a line is either covered by the entry of the run it describes or listed as ``not_a_claim``.

An entry covers the lines that its quotes span. A quote is matched verbatim after collapsing
every run of whitespace (a line break included) to one space, so a quote may run across lines.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
LEDGER = ROOT / "benchmarks" / "claims.yaml"
COSTS = ("seconds", "minutes", "hour", "gpu")
OPS = ("within", "at_least", "at_most")
# a metric that measures the machine's speed (seconds, rates, utilisation) rather than what a
# run learns: its figure holds only on the machine it was measured on (``Check.machine_bound``);
# ratios of two speeds on one machine (speedups, a pick over the fastest) are not
_SPEED = re.compile(
    r"(?:^|[._])(?:\w*_s|sps|train_sps|seconds|iteration|mfu|tokens_per_s|samples_per_s)$"
)

_CODE = re.compile(r"`[^`]*`")
_FIGURE = re.compile(
    r"""(?<![\w.])(?:
       -?\d+\.\d+(?![\d.])             # 0.495, -22.9 (not 1.2.0)
     | \d+(?:\.\d+)?%                  # 85%
     | \d+(?:\.\d+)?x(?!\w)            # 1.6x
     | \d+(?:\.\d+)?[kM](?!\w)         # 20.3k, 1.5M
     | \d{1,3}(?:,\d{3})+(?!\d)        # 30,720
     | -\d+(?![\d.])                   # -33
     | \d+(?:\ /\ -?\d+)+(?![\d.])       # 1802 / 1640 / 1789
     | \d+\ ->\ \d+                     # 500 -> 11
    )|(?:(?<=about\ )|(?<=~))-?\d+     # about 5, ~200
    """,
    re.X,
)
_OUTCOME = re.compile(
    r"""\b(?:accura\w*|returns?|eval\w*|success\w*|reach\w*|solved|steps/s|tokens/s|samples/s
     |faster|slower|speed\w*|ratio|median|seeds?|measured|points|throughput|rewards?
     |score[sd]?|ends?\ at|wall|took|in\ \d+(?:\.\d+)?\ ?(?:s|min|minutes)\b)""",
    re.X | re.I,
)


@dataclass(frozen=True)
class Check:
    """One figure of a claim: ``metric`` is a dotted key path into the JSON line the command
    prints (its last JSON line on stdout matching the claim's ``select``), ``expected`` the
    stated value in the metric's units; ``op`` within (``|median - expected| <= tolerance``),
    at_least or at_most (the stated bound, ``tolerance`` ignored)."""

    metric: str
    expected: float
    tolerance: float = 0.0
    op: str = "within"
    speed: bool | None = None  # None: inferred from the metric's name (``machine_bound``)

    @property
    def machine_bound(self) -> bool:
        """A speed (seconds, a rate): it holds only where it was measured, since another CPU
        runs the same code at another speed. Named by ``speed``, else by the metric's last key
        (``wall_s``, ``sps``, ``seconds_per_stage.iteration``, ``mfu``; list indices skipped)."""
        if self.speed is not None:
            return self.speed
        keys = [k for k in self.metric.split(".") if not k.lstrip("-").isdigit()]
        return bool(_SPEED.search(keys[-1]))

    def holds(self, value: float) -> bool:
        if self.op == "at_least":
            return value >= self.expected
        if self.op == "at_most":
            return value <= self.expected
        # (a band's edge holds: 0.445 - 0.44 is 0.0050000000000000044 in floating point)
        return abs(value - self.expected) <= self.tolerance * (1 + 1e-9) + 1e-12


@dataclass(frozen=True)
class Claim:
    """A run figure: ``where`` the docs state it (file, quote) pairs, the ``command`` that
    produces it (argv from the repository root), the ``seeds`` it runs on, its ``checks``, the
    ``basis`` of their tolerances, and its ``cost`` class; ``rerun = false`` with ``why`` for a
    figure of an earlier tree or of another project's baseline; ``drifted`` and ``measured``
    for one known not to hold on main; ``machine`` (a name of the ledger's ``machines``) where
    its speeds were measured, None before the ledger named machines."""

    name: str
    where: tuple[tuple[str, str], ...]
    cost: str
    command: tuple[str, ...] = ()
    seeds: tuple[int, ...] = (1,)
    select: dict = field(default_factory=dict)
    checks: tuple[Check, ...] = ()
    basis: str = ""
    rerun: bool = True
    why: str = ""
    drifted: bool = False
    measured: tuple[float, ...] = ()
    machine: str | None = None


@dataclass(frozen=True)
class NotAClaim:
    file: str
    quote: str
    reason: str


@dataclass(frozen=True)
class Ledger:
    claims: tuple[Claim, ...]
    not_claims: tuple[NotAClaim, ...]
    machines: dict[str, dict] = field(default_factory=dict)

    def machine_named(self, here: dict) -> str | None:
        """The name of the machine ``here`` (``rlcore.runners.profiling.machine()``) in the
        ledger's ``machines``: the same CPU model, core count and vector instruction sets."""
        for name, known in self.machines.items():
            if all(here.get(k) == v for k, v in known.items()):
                return name
        return None

    def claim(self, name: str) -> Claim:
        for claim in self.claims:
            if claim.name == name:
                return claim
        names = ", ".join(c.name for c in self.claims)
        raise KeyError(f"no claim named {name!r} in {LEDGER.name}; the names: {names}")


def _claim(raw: dict) -> Claim:
    where = f"{LEDGER.name}: claim {raw.get('name', '?')!r}"
    for key in ("name", "where", "cost"):
        if key not in raw:
            raise ValueError(f"{where} lacks {key!r}")
    if raw["cost"] not in COSTS:
        raise ValueError(f"{where}: cost {raw['cost']!r}, allowed: {', '.join(COSTS)}")
    checks = tuple(Check(**c) for c in raw.get("checks", ()))
    if any(c.op not in OPS for c in checks):
        raise ValueError(f"{where}: a check's op is not one of {', '.join(OPS)}")
    rerun = raw.get("rerun", True)
    if rerun and not (raw.get("command") and checks):
        raise ValueError(f"{where}: a rerun claim needs command and checks (or rerun = false)")
    if not rerun and not raw.get("why"):
        raise ValueError(f"{where}: rerun = false needs why (what the figure is of)")
    known = {f for f in Claim.__dataclass_fields__}
    if unknown := set(raw) - known:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}, allowed: {sorted(known)}")
    return Claim(
        **{
            **raw,
            "where": tuple((str(f), str(q)) for f, q in raw["where"]),
            "command": tuple(raw.get("command", ())),
            "seeds": tuple(raw.get("seeds", (1,))),
            "checks": checks,
            "measured": tuple(raw.get("measured", ())),
        }
    )


def load(path: Path = LEDGER) -> Ledger:
    data = yaml.safe_load(path.read_text()) or {}
    claims = tuple(_claim(raw) for raw in data.get("claims", ()))
    seen: set[str] = set()
    for claim in claims:
        if claim.name in seen:
            raise ValueError(f"{path.name}: two claims named {claim.name!r}")
        seen.add(claim.name)
    not_claims = tuple(NotAClaim(**raw) for raw in data.get("not_a_claim", ()))
    machines = dict(data.get("machines") or {})
    for claim in claims:
        if claim.machine is not None and claim.machine not in machines:
            raise ValueError(
                f"{path.name}: claim {claim.name!r} names machine {claim.machine!r}, not one of "
                f"machines: {', '.join(machines) or '(none)'}"
            )
    return Ledger(claims, not_claims, machines)


def scanned_files(root: Path = ROOT) -> list[Path]:
    return [
        root / "README.md",
        *sorted((root / "docs").glob("*.md")),
        *sorted((root / "examples").rglob("*.py")),
        *sorted((root / "configs").rglob("*.yaml")),
    ]


def _python_prose(text: str) -> dict[int, str]:
    """Line number -> the docstring or comment text on that line."""
    prose: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            prose[token.start[0]] = token.string.lstrip("#")
        elif token.type == tokenize.STRING and token.string.endswith(('"""', "'''")):
            for k, line in enumerate(token.string.splitlines()):
                prose[token.start[0] + k] = line
    return prose


def prose_lines(path: Path) -> list[tuple[int, str, str]]:
    """(line number, prose text, context) of a scanned file; context is the text the outcome
    words are looked for in (a Markdown table row's header joined to it)."""
    text = path.read_text()
    if path.suffix == ".py":
        return [(n, line, line) for n, line in sorted(_python_prose(text).items())]
    if path.suffix in (".yaml", ".yml"):
        out = []
        for n, line in enumerate(text.splitlines(), 1):
            if "#" in line:
                comment = line[line.index("#") + 1 :]
                out.append((n, comment, comment))
        return out
    out, header = [], None
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("|") and header is None:  # a header names, states nothing
            header = line
            out.append((n, line, ""))
        elif line.lstrip().startswith("|"):
            out.append((n, line, f"{header} {line}"))
        else:
            header = None
            out.append((n, line, line))
    return out


def states_a_figure(text: str, context: str) -> bool:
    return bool(_FIGURE.search(_CODE.sub(" ", text)) and _OUTCOME.search(_CODE.sub(" ", context)))


def _squash(text: str) -> str:
    return " ".join(text.split())


def covered_lines(lines: list[tuple[int, str, str]], quote: str) -> set[int]:
    """The line numbers the quote's occurrences span (empty: the quote is not in the file)."""
    joined, starts = [], []  # the squashed prose, and where each line's text begins in it
    position = 0
    for number, text, _ in lines:
        piece = _squash(text)
        starts.append((position, number))
        joined.append(piece)
        position += len(piece) + 1
    haystack, needle = " ".join(joined), _squash(quote)
    spanned: set[int] = set()
    at = haystack.find(needle)
    while needle and at >= 0:
        end = at + len(needle)
        spanned |= {n for i, (s, n) in enumerate(starts) if s < end and _next(starts, i) > at}
        at = haystack.find(needle, at + 1)
    return spanned


def _next(starts: list[tuple[int, int]], i: int) -> int:
    return starts[i + 1][0] if i + 1 < len(starts) else 1 << 62


def quotes_by_file(ledger: Ledger) -> dict[str, list[str]]:
    by_file: dict[str, list[str]] = {}
    for claim in ledger.claims:
        for name, quote in claim.where:
            by_file.setdefault(name, []).append(quote)
    for item in ledger.not_claims:
        by_file.setdefault(item.file, []).append(item.quote)
    return by_file


def stale_quotes(ledger: Ledger, root: Path = ROOT) -> list[str]:
    """``file: quote`` for each ledger quote no longer found in its file."""
    stale = []
    for name, quotes in quotes_by_file(ledger).items():
        path = root / name
        lines = prose_lines(path) if path.is_file() else []
        stale += [f"{name}: {q!r}" for q in quotes if not covered_lines(lines, q)]
    return stale


def uncovered(ledger: Ledger, root: Path = ROOT) -> list[str]:
    """``file:line: text`` for each line that states a figure and no quote covers."""
    by_file = quotes_by_file(ledger)
    found = []
    for path in scanned_files(root):
        name = str(path.relative_to(root))
        lines = prose_lines(path)
        covered: set[int] = set()
        for quote in by_file.get(name, ()):
            covered |= covered_lines(lines, quote)
        found += [
            f"{name}:{n}: {text.strip()}"
            for n, text, context in lines
            if n not in covered and states_a_figure(text, context)
        ]
    return found
