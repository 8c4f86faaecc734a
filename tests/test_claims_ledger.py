"""Every run figure the docs state is in the ledger (benchmarks/claims.yaml), and every ledger
entry still points at text the docs hold (issue 55). Text scanning only: no run starts here;
benchmarks/claims.py reruns the entries."""

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HOW_TO_ADD = """add each line's figure to benchmarks/claims.yaml (its header says every field):
under `claims:` an entry

  - name: NAME
    where: [[FILE, 'a quote of the figure, verbatim (line breaks may fall anywhere in it)']]
    command: ['{python}', SCRIPT, 'runner.seed={seed}', ...]
    seeds: [1, 2, 3]
    checks: [{metric: SUMMARY_KEY, expected: VALUE, tolerance: HALF_THE_SEEDS_SPREAD}]
    basis: where the tolerance comes from
    cost: seconds | minutes | hour | gpu

(or, for a figure of an earlier tree, rerun: false and why: instead of command and checks; or
one more [FILE, QUOTE] in the `where` of the entry whose run states it). A line that states no
run's outcome goes under `not_a_claim:` as {file: FILE, quote: QUOTE, reason: WHY}. The lines:"""


def _ledger_module():
    spec = importlib.util.spec_from_file_location(
        "claims_ledger", ROOT / "benchmarks" / "claims_ledger.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("claims_ledger", module)
    spec.loader.exec_module(module)
    return module


cl = _ledger_module()


@pytest.fixture(scope="module")
def ledger():
    return cl.load()


def test_every_figure_the_docs_state_is_in_the_ledger(ledger):
    missing = cl.uncovered(ledger)
    assert not missing, (
        f"{len(missing)} line(s) state a run figure the ledger lacks; {HOW_TO_ADD}\n"
        + "\n".join(missing)
    )


def test_every_ledger_quote_is_still_in_its_file(ledger):
    stale = cl.stale_quotes(ledger)
    assert not stale, (
        "ledger quotes no longer found verbatim (the doc changed: update the quote, and the "
        "figure if it changed):\n" + "\n".join(stale)
    )


def _named_paths(command: tuple[str, ...]) -> list[Path]:
    """The scripts and configs a command names, inside a ``bash -c`` string too: a path under
    examples/, benchmarks/ or tests/ ending .py or .sh, and the config after ``--config``."""
    text = " ".join(command)
    scripts = re.findall(r"(?:examples|benchmarks|tests)/[\w/.-]+\.(?:py|sh)", text)
    configs = re.findall(r"--config[ =]([\w/.-]+)", text)
    return [ROOT / s for s in scripts] + [ROOT / "configs" / f"{c}.yaml" for c in configs]


def test_every_command_names_an_existing_script_and_config(ledger):
    absent = [
        f"{claim.name}: {path.relative_to(ROOT)}"
        for claim in ledger.claims
        for path in _named_paths(claim.command)
        if not path.is_file()
    ]
    assert not absent, absent
    runnable = [c for c in ledger.claims if c.rerun]
    assert all(_named_paths(c.command) for c in runnable), "a rerun command names no script"


def test_the_scanner_flags_the_issues_drifted_figures():
    # the three figures issue 55 found drifted, as they were worded: each is a run figure
    lines = [
        "Staying put scores about -33; the command above reaches about -5 in 50k steps (15 s).",
        "verdicts): greedy validation accuracy 0.495 before, after 0.825 / 0.84 / 0.78 on seeds",
        "| 2 slots, `max_staleness: 1` | 0.283 / 0.267 / 0.275 | 465 | 0.75 / 0.71 / 0.735 |",
    ]
    header = "| system | seconds an iteration (seeds 1 / 2 / 3) | samples/s (median) | accuracy |"
    assert cl.states_a_figure(lines[0], lines[0])
    assert cl.states_a_figure(lines[1], lines[1])
    assert cl.states_a_figure(lines[2], f"{header} {lines[2]}")
    # and what is no figure: a setting in backticks, a version, an exponent
    for text in (
        "the eval runs every `runner.eval_every: 5` iterations, accuracy from `0.5`",
        "accuracy with cleanrl 1.2.0 and lr 3e-4",
    ):
        assert not cl.states_a_figure(text, text), text


def test_a_quote_across_lines_covers_each_line_it_spans(tmp_path):
    doc = tmp_path / "d.md"
    doc.write_text("intro\nseeds 1/2/3 reach it at 30,720 /\n  56,320 steps.\nnext 0.5 eval\n")
    lines = cl.prose_lines(doc)
    assert cl.covered_lines(lines, "reach it at 30,720 / 56,320 steps") == {2, 3}
    assert cl.covered_lines(lines, "not in the file") == set()


def _tiny_repo(root: Path) -> None:
    (root / "docs").mkdir()
    (root / "examples").mkdir()
    (root / "configs").mkdir()
    (root / "README.md").write_text("# x\nIt trains in 49-61 s to 85% accuracy.\n")
    (root / "docs" / "a.md").write_text("| run | eval return |\n|---|---|\n| ppo | 495.2 |\n")
    (root / "examples" / "e.py").write_text(
        '"""Reaches about -5 in 50k steps."""\n\nx = 0.5  # reward 0.25 here\nreturn_ = 0.9\n'
    )
    (root / "configs" / "c.yaml").write_text("lr: 0.001  # median return 1789 / 1640 here\n")


def test_uncovered_names_each_file_and_line_until_quoted(tmp_path):
    _tiny_repo(tmp_path)
    empty = cl.Ledger((), ())
    assert cl.uncovered(empty, tmp_path) == [
        "README.md:2: It trains in 49-61 s to 85% accuracy.",
        "docs/a.md:3: | ppo | 495.2 |",
        'examples/e.py:1: """Reaches about -5 in 50k steps."""',
        "examples/e.py:3: reward 0.25 here",
        "configs/c.yaml:1: median return 1789 / 1640 here",
    ]
    ledger_file = tmp_path / "ledger.yaml"
    ledger_file.write_text(
        "claims:\n"
        "  - name: one\n"
        "    where: [[README.md, '85% accuracy'], [docs/a.md, '| ppo | 495.2 |'],\n"
        "            [examples/e.py, 'about -5'], [configs/c.yaml, '1789 / 1640']]\n"
        "    cost: seconds\n"
        "    rerun: false\n"
        "    why: a test\n"
        "not_a_claim:\n"
        "  - {file: examples/e.py, quote: reward 0.25, reason: a test}\n"
        "  - {file: docs/a.md, quote: gone from the doc, reason: a test}\n"
    )
    ledger = cl.load(ledger_file)
    assert cl.uncovered(ledger, tmp_path) == []
    assert cl.stale_quotes(ledger, tmp_path) == ["docs/a.md: 'gone from the doc'"]


def test_the_ledger_refuses_an_entry_it_could_not_rerun_or_place(tmp_path):
    bad = tmp_path / "ledger.yaml"
    bad.write_text("claims:\n  - {name: x, where: [[README.md, q]], cost: days}\n")
    with pytest.raises(ValueError, match="cost 'days', allowed: seconds, minutes, hour, gpu"):
        cl.load(bad)
    bad.write_text("claims:\n  - {name: x, where: [[README.md, q]], cost: seconds}\n")
    with pytest.raises(ValueError, match="needs command and checks"):
        cl.load(bad)


def test_a_figure_on_its_bands_edge_holds_and_one_past_it_does_not():
    """A band stated as 43.5-44.5% is 0.44 +- 0.005: both edges hold, though 0.445 - 0.44 is
    0.0050000000000000044 in floating point; a thousandth past either edge does not."""
    check = cl.Check(metric="m", expected=0.44, tolerance=0.005)
    assert check.holds(0.445) and check.holds(0.435) and check.holds(0.44)
    assert not check.holds(0.446) and not check.holds(0.434)


def test_speeds_are_machine_bound_and_outcomes_are_not():
    """Seconds and rates hold only where measured; accuracies, returns, step counts and ratios
    of two speeds everywhere; ``speed`` overrides the name (a prediction computed on paper)."""
    bound = ["wall_s", "sps", "train_sps", "seconds_per_stage.iteration", "iteration_s.-1"]
    bound += ["median.spawn.replace_s", "median_samples_per_s", "runs.1.stages.actor_update.mfu"]
    free = ["val_accuracy_after", "eval_return_mean", "steps_to_threshold", "compiled_speedup"]
    free += ["speedup_vs_apart_sync", "pick_over_fastest", "max_abs_error", "peak_memory_gib"]
    assert all(cl.Check(metric=m, expected=1).machine_bound for m in bound)
    assert not any(cl.Check(metric=m, expected=1).machine_bound for m in free)
    on_paper = cl.Check(metric="candidates.0.predicted_iteration_s", expected=1, speed=False)
    assert not on_paper.machine_bound


def test_a_speed_is_judged_only_on_its_machine(tmp_path):
    spec = importlib.util.spec_from_file_location("claims", ROOT / "benchmarks" / "claims.py")
    claims = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(claims)
    ledger = tmp_path / "ledger.yaml"
    ledger.write_text(
        "machines: {box: {cpus: 2, cpu: X}}\n"
        "claims:\n  - {name: c, where: [[README.md, q]], cost: seconds, machine: box,\n"
        "     command: [a], checks: [{metric: acc, expected: 0.5, tolerance: 0.1},\n"
        "                            {metric: wall_s, expected: 10, tolerance: 1}]}\n"
    )
    loaded = cl.load(ledger)
    claim = loaded.claim("c")
    assert loaded.machine_named({"cpus": 2, "cpu": "X", "simd": []}) == "box"
    assert loaded.machine_named({"cpus": 4, "cpu": "X"}) is None
    slow = [[0.55], [20.0]]  # the accuracy within its band, the seconds twice the figure
    assert claims.verdict(claim, slow, "box") is False
    assert claims.verdict(claim, slow, None) is True  # elsewhere only the accuracy counts
    assert claims.verdict(claim, [[0.7], [10.0]], None) is False
    only_speed = cl.Claim(
        name="s", where=(), cost="seconds", checks=(claim.checks[1],), machine="box"
    )
    assert claims.verdict(only_speed, [[20.0]], None) is None
    ledger.write_text(ledger.read_text().replace("machine: box", "machine: other"))
    with pytest.raises(ValueError, match="names machine 'other', not one of machines: box"):
        cl.load(ledger)


def test_a_logged_run_depends_on_the_scripts_its_command_runs():
    """``--resume`` keeps a run while its code is unchanged: the package, configs and examples,
    and the scripts the command names with the benchmark modules they import (found here by
    reading them), not every other benchmark."""
    spec = importlib.util.spec_from_file_location("claims", ROOT / "benchmarks" / "claims.py")
    claims = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(claims)
    paths = claims.code_paths(["{python}", "benchmarks/card_shape.py", "--seeds", "1"])
    assert paths == (*claims.CODE_PATHS, "benchmarks/card_shape.py", "benchmarks/embodied.py")
    inline = claims.code_paths(["{python}", "benchmarks/gpu_check.py"])  # imports in a function
    assert "benchmarks/moe_replay.py" in inline
    policy = [
        "{python}",
        "examples/embodied/main.py",
        "actor.model.cls=tests/models/user_policies.py:X",
    ]
    assert "tests/models/user_policies.py" in claims.code_paths(policy)
    shell = ["bash", "-c", "{python} examples/reasoning/train_reward_model.py && {python} x.py"]
    assert "examples/reasoning/train_reward_model.py" in claims.code_paths(shell)


def test_resume_skips_log_lines_that_are_no_run_and_says_how_many(tmp_path, capsys):
    """A log file that another benchmark's output was appended to (or a line a crash cut short)
    still resumes: those lines are skipped and counted on stderr, the runs read as before."""
    spec = importlib.util.spec_from_file_location("claims", ROOT / "benchmarks" / "claims.py")
    claims = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(claims)
    here = {"cpus": 2}
    run = {
        "name": "a",
        "seed": 1,
        "values": [1.0],
        "error": "",
        "machine": here,
        "commit": claims.head_commit(),
        "command": ["{python}", "examples/embodied/main.py"],
    }
    lines = [
        json.dumps(run),
        json.dumps({"config": "x", "val_accuracy_after": 0.5}),  # another benchmark's line
        json.dumps({**run, "seed": 3})[:40],  # cut short
        json.dumps({**run, "seed": 4, "error": "exit 1: boom"}),  # failed: never counts
    ]
    log = tmp_path / "runs.jsonl"
    log.write_text("\n".join(lines) + "\n")
    runs = claims.logged_runs(log, here)
    assert list(runs) == [("a", 1)] and runs["a", 1]["values"] == [1.0]
    assert "2 line(s) that are no run of claims.py, skipped" in capsys.readouterr().err


def test_a_logged_run_of_another_machine_counts_unless_its_speed_is_judged_here(tmp_path):
    """The log outlives the machine: another machine's run of the same code stands for a run
    here (its accuracy judged as any seed's), this machine's run of the same seed first; where
    this machine is the claim's own, its speed is judged, so only a run here counts."""
    spec = importlib.util.spec_from_file_location("claims", ROOT / "benchmarks" / "claims.py")
    claims = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(claims)
    box, other = {"cpus": 2, "cpu": "X"}, {"cpus": 64, "cpu": "Y"}
    ledger = tmp_path / "ledger.yaml"
    ledger.write_text(
        "machines: {box: {cpus: 2, cpu: X}, big: {cpus: 64, cpu: Y}}\n"
        "claims:\n  - {name: c, where: [[README.md, q]], cost: seconds, machine: box,\n"
        "     seeds: [1, 2], command: [a],\n"
        "     checks: [{metric: acc, expected: 0.5, tolerance: 0.1},\n"
        "              {metric: wall_s, expected: 10, tolerance: 1}]}\n"
    )
    loaded = cl.load(ledger)
    claim = loaded.claim("c")
    run = {"name": "c", "seed": 1, "error": "", "commit": claims.head_commit(), "command": ["a"]}
    lines = [
        {**run, "values": [0.9, 10.0], "machine": box},  # seed 1 here: drifted accuracy
        {**run, "values": [0.5, 30.0], "machine": other},  # seed 1 elsewhere, later in the log
        {**run, "seed": 2, "values": [0.52, 31.0], "machine": other},
    ]
    log = tmp_path / "runs.jsonl"
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    runs = claims.logged_runs(log, box)
    assert runs["c", 1]["values"] == [0.9, 10.0]  # this machine's run first
    assert runs["c", 2]["machine"] == other
    # on its own machine ("box") the speed is judged: another machine's run does not count
    assert claims.counts_here(claim, runs["c", 1], box, "box")
    assert not claims.counts_here(claim, runs["c", 2], box, "box")
    # elsewhere it counts: seen from a third machine, seed 2's run comes from "big"
    assert claims.counts_here(claim, runs["c", 2], {"cpus": 8}, None)
    assert not claims.counts_here(claim, {**runs["c", 2], "command": ["b"]}, {"cpus": 8}, None)
    # judged per run: the speed only when every run was on the claim's machine
    assert claims.judged(claim, ["box", "box"]) == [True, True]
    assert claims.judged(claim, ["box", "big"]) == [True, False]
    assert claims.verdict(claim, [[0.5, 0.52], [30.0, 31.0]], ["big", "big"]) is True
    assert claims.verdict(claim, [[0.5, 0.52], [30.0, 31.0]], ["box", "box"]) is False
    unplaced = cl.Claim(name="u", where=(), cost="seconds", checks=claim.checks, machine=None)
    assert claims.judged(unplaced, [None]) == [True, False]  # a speed of no named machine


def test_status_reads_each_claims_state_from_the_log(tmp_path, capsys):
    """``--status`` judges what the log holds, running nothing: all seeds logged -> held or
    drifted by the medians (a speed judged only on its machine), some -> partial, none -> none."""
    spec = importlib.util.spec_from_file_location("claims", ROOT / "benchmarks" / "claims.py")
    claims = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(claims)
    ledger = tmp_path / "ledger.yaml"
    entry = "where: [[README.md, q]], cost: seconds, command: [{n}], seeds: [1, 2, 3]"
    checks = "checks: [{metric: acc, expected: 0.5, tolerance: 0.1}]"
    ledger.write_text(
        "machines: {box: {cpus: 2}}\nclaims:\n"
        + "".join(f"  - {{name: {n}, {entry.format(n=n)}, {checks}}}\n" for n in "hdpn")
        + "  - {name: s, where: [[README.md, q]], cost: seconds, command: [s], machine: box,\n"
        "     checks: [{metric: wall_s, expected: 10, tolerance: 1}]}\n"
    )
    loaded = cl.load(ledger)
    head = claims.head_commit()
    values = {"h": [0.4, 0.5, 0.9], "d": [0.3, 0.7, 0.3], "p": [0.5]}  # medians 0.5, 0.3
    lines = [
        {"name": n, "seed": i + 1, "values": [v], "error": "", "commit": head, "command": [n]}
        for n, vs in values.items()
        for i, v in enumerate(vs)
    ]
    lines.append(
        {"name": "s", "seed": 1, "values": [10.0], "error": "", "commit": head, "command": ["s"]}
    )
    log = tmp_path / "runs.jsonl"
    log.write_text("".join(json.dumps({**line, "machine": {"cpus": 2}}) + "\n" for line in lines))
    counts = claims.status(loaded, log, {"cpus": 2})
    assert counts == {"held": 2, "drifted": 1, "partial": 1, "none": 1}
    # seen from another machine the same: s's speed was measured on its own machine ("box")
    assert claims.status(loaded, log, {"cpus": 4}) == counts
    assert "partial   1/3  seed 1: 0.5 [box]" in capsys.readouterr().out
    # a later run of s on an unnamed machine: seen from a third, the latest counts and its
    # speed is not judged; seen from "box", box's own run comes first
    with log.open("a") as file:
        file.write(json.dumps({**lines[-1], "machine": {"cpus": 4}}) + "\n")
    assert claims.status(loaded, log, {"cpus": 8}) == {**counts, "held": 1, "unjudged": 1}
    assert claims.status(loaded, log, {"cpus": 2}) == counts


def test_a_run_records_the_configs_its_processes_read_and_depends_on_those_alone():
    """Each file under configs/ that a run's Python processes open (a child process's too, and
    one opened by a path relative to a folder inside it, and the files a composition's
    defaults list pulls in) is recorded, nothing else (not the
    description lines an entry point's help text reads from every config); a logged run
    with that record depends on those configs, not on every other, and one logged without it
    on the whole folder."""
    spec = importlib.util.spec_from_file_location("claims", ROOT / "benchmarks" / "claims.py")
    claims = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(claims)
    child = "open('configs/embodied/cartpole_ppo.yaml').read()"
    inside = "open('cartpole_ppo_separate_trunks.yaml').read()"
    script = (
        "import subprocess, sys; open('pyproject.toml').read(); "
        f"subprocess.run([sys.executable, '-c', {child!r}], check=True); "
        # (a relative path inside the folder, which names no 'configs')
        f"subprocess.run([sys.executable, '-c', {inside!r}], cwd='configs/embodied', check=True); "
        "from rlcore.config import load_config; "
        "load_config('reasoning/tiny_visual_arith_grpo', []); "
        # (the help text's reader of every shipped config: no dependency, not recorded)
        "from rlcore.config.composition import shipped_configs; shipped_configs('embodied'); "
        "print('{\"ok\": 1}')"
    )
    claim = cl.Claim(name="c", where=(), cost="seconds", command=("{python}", "-c", script))
    stdout, error, configs = claims.run_command(claim, 1, {})
    assert error == "" and stdout.strip().endswith('{"ok": 1}')
    # the visual config's defaults list names the text task's config, and that the cluster group
    assert configs == [
        "cluster/local.yaml",
        "embodied/cartpole_ppo.yaml",
        "embodied/cartpole_ppo_separate_trunks.yaml",
        "reasoning/tiny_arith_ppo.yaml",
        "reasoning/tiny_visual_arith_grpo.yaml",
    ]
    paths = claims.code_paths(["{python}", "benchmarks/reasoning.py"], configs)
    assert "configs" not in paths and "rlcore" in paths and "benchmarks/reasoning.py" in paths
    assert "configs/reasoning/tiny_arith_ppo.yaml" in paths
    assert "configs" in claims.code_paths(["{python}", "benchmarks/reasoning.py"])
