"""The advisor's candidates: the enumeration's counts against closed forms, every candidate a
plan the run's own checks accept, and the JSON line's schema."""

import json
import math

import pytest

from rlcore.config import load_config
from rlcore.config.load import replace_keys
from rlcore.placement import plan_for_config
from rlcore.placement.advise import (
    Ranked,
    compositions,
    json_line,
    rank,
    set_partitions,
    simplest_first,
    valid_candidates,
)
from rlcore.placement.cost import Candidate, Link, Prediction, Profile, Work


@pytest.mark.parametrize(("n", "bell"), [(1, 1), (3, 5), (4, 15), (5, 52)])
def test_set_partitions_are_the_bell_number_many(n, bell):
    items = [f"c{i}" for i in range(n)]
    partitions = list(set_partitions(items))
    assert len(partitions) == bell
    assert len({tuple(sorted(map(tuple, map(sorted, p)))) for p in partitions}) == bell
    for p in partitions:  # each item once
        assert sorted(c for group in p for c in group) == sorted(items)


@pytest.mark.parametrize(("total", "parts"), [(2, 2), (5, 3), (16, 4)])
def test_compositions(total, parts):
    found = list(compositions(total, parts))
    assert len(found) == math.comb(total - 1, parts - 1)
    assert all(sum(c) == total and min(c) >= 1 and len(c) == parts for c in found)


def test_the_pick_is_the_fewest_processes_within_a_margin_of_the_fastest():
    one = Candidate(((("actor", "rollout"), (0,)),))  # 1 process
    two = Candidate(((("actor",), (0,)), (("rollout",), (1,))), max_staleness=1)  # 2
    three = Candidate(((("actor",), (0,)), (("rollout",), (1,)), (("reward",), (1,))))  # 3

    def ranked(*pairs):
        return [Ranked(c, Prediction(s, {}, ""), 1.0) for c, s in pairs]

    # 1.00 and 1.04 are within 5%: the one process goes first, the rest keep their order
    got = simplest_first(ranked((two, 1.00), (three, 1.02), (one, 1.04)), close=0.05)
    assert [r.candidate for r in got] == [one, two, three]
    # 1.06 is not: the two processes' 6% is trusted
    got = simplest_first(ranked((two, 1.00), (one, 1.06)), close=0.05)
    assert [r.candidate for r in got] == [two, one]
    # within the margin, among equally many processes, the faster
    got = simplest_first(ranked((three, 1.00), (two, 1.03), (two, 1.04)), close=0.05)
    assert got[0].prediction.iteration_s == 1.03
    # any order in: a ranking with its pick first, filtered, is picked from again
    got = simplest_first(ranked((two, 1.04), (three, 1.00), (two, 1.03)), close=0.05)
    assert got[0].prediction.iteration_s == 1.03
    got = simplest_first(ranked((two, 1.00), (one, 1.06)), close=0.05)[1:]  # the pick left out
    assert simplest_first(got)[0].candidate == one
    # the advisor's own margin, 20%: 1.19 is within it, 1.21 not
    assert simplest_first(ranked((two, 1.00), (one, 1.19)))[0].candidate == one
    assert simplest_first(ranked((two, 1.00), (one, 1.21)))[0].candidate == two


def _as_run(config, entry):
    changes = {
        "cluster.component_placement": entry["placement"],
        "cluster.fuse_collocated": entry["fuse_collocated"],
        "runner.max_staleness": entry["max_staleness"],
        "runner.torch_threads": entry["torch_threads"],
    }
    if config.mode == "embodied":
        changes["rollout.pipeline_stage_num"] = entry["pipeline_stage_num"]
    return replace_keys(config, changes)


def _flat_profile(mode, stages):
    work = {s: {c: Work(1.0)} for s, c in stages.items()}
    return Profile(mode, 1, {s: 1.0 for s in stages}, work, Link(1e-3, 1e9))


@pytest.mark.parametrize(
    ("name", "stages"),
    [
        ("embodied/cartpole_ppo", {"collect": "rollout", "update": "actor"}),
        ("reasoning/tiny_arith_ppo", {"generate": "rollout", "actor_update": "actor"}),
    ],
)
def test_every_candidate_runs_as_written(name, stages):
    config = load_config(name, ["cluster.devices_per_node=2"])
    candidates = valid_candidates(config, threads=(1, 2))
    layouts = {(json.dumps(c.placement()), c.fused, c.max_staleness) for c in candidates}
    assert (json.dumps({",".join(c for c in candidates[0].groups[0][0]): "0"}), True, 0) in layouts
    assert any(c.max_staleness == 1 for c in candidates)  # the rollout apart, asynchronous
    ranked = rank(candidates, {1: _flat_profile(config.mode, stages)})
    line = json.loads(json_line(ranked))
    assert line["best"] == 0
    times = [e["predicted_iteration_s"] for e in line["candidates"]]
    assert times == sorted(times)
    # a placement's variants that predict the same are listed once, fused and with fewer stages
    twins = [
        (json.dumps(e["placement"]), e["max_staleness"], e["predicted_iteration_s"])
        for e in line["candidates"]
    ]
    assert len(twins) == len(set(twins))
    listed = {
        (json.dumps(c.placement()), c.max_staleness) for c in candidates if c.torch_threads == 1
    }
    assert {t[:2] for t in twins} == listed  # every placement and staleness still there
    for entry in line["candidates"]:
        assert set(entry) == {
            "placement",
            "max_staleness",
            "pipeline_stage_num",
            "torch_threads",
            "fuse_collocated",
            "predicted_iteration_s",
        }
        plan_for_config(_as_run(config, entry))  # the run's checks accept it as written


def test_on_paper_from_a_profile_file(tmp_path, capsys):
    from rlcore.cli import main
    from rlcore.runners.profiling import to_json

    config = load_config("reasoning/tiny_arith_ppo", ["cluster.devices_per_node=2"])
    stages = {"generate": "rollout", "actor_update": "actor", "values": "critic"}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(to_json({1: _flat_profile("reasoning", stages)}, config)))
    argv = ["placement", "reasoning/tiny_arith_ppo", "cluster.devices_per_node=2", "--advise"]
    assert main([*argv, "--profile-file", str(path), "--throughput", "2"]) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # every stage 1 s in one process: 3 s, halved by the faster device
    alone = [e for e in line["candidates"] if list(e["placement"].values()) == ["0"]]
    assert alone[0]["predicted_iteration_s"] == pytest.approx(1.5)
    other = load_config("embodied/cartpole_ppo")
    path.write_text(json.dumps(to_json({1: _flat_profile("embodied", {})}, other)))
    for extra, said in (
        (["--profile-file", str(path)], "of mode embodied, this one is of mode reasoning"),
        (["--profile-file", str(tmp_path / "none.json")], "is not a placement profile"),
    ):
        with pytest.raises(SystemExit) as done:
            main([*argv, *extra])
        assert done.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and said in err[0]


def test_of_variants_that_predict_the_same_the_simplest_is_listed():
    # reasoning: the driver makes every call, so with the actor and the rollout in separate
    # groups a process per component predicts what the fused layout does
    groups = ((("actor", "critic"), (0,)), (("rollout", "reward"), (1,)))
    fused, apart = Candidate(groups), Candidate(groups, fused=False)
    profile = _flat_profile("reasoning", {"generate": "rollout", "actor_update": "actor"})
    for order in ([apart, fused], [fused, apart]):
        (only,) = rank(order, {1: profile})
        assert only.candidate == fused


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--throughput", "2"], "--throughput: goes with --profile-file"),
        (["--profile-file", "p.json"], "--profile-file: goes with --advise"),
        (["--iterations", "5"], "--iterations: goes with --profile or --advise"),
        (["--advise", "--iterations", "0"], "--iterations: 0; give at least 1"),
    ],
)
def test_placement_options_that_mean_nothing_alone_are_refused(extra, said, capsys):
    from rlcore.cli import main

    with pytest.raises(SystemExit) as done:
        main(["placement", "embodied/cartpole_ppo", *extra])
    assert done.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0]


def test_a_profile_file_with_bad_figures_is_refused_naming_the_field(tmp_path, capsys):
    from rlcore.cli import main
    from rlcore.runners.profiling import to_json

    config = load_config("reasoning/tiny_arith_ppo", ["cluster.devices_per_node=2"])
    good = to_json({1: _flat_profile("reasoning", {"generate": "rollout"})}, config)
    path = tmp_path / "p.json"
    argv = ["placement", "reasoning/tiny_arith_ppo", "--advise", "--profile-file", str(path)]

    def spoiled(edit):
        data = json.loads(json.dumps(good))
        edit(data["profiles"]["1"])
        return data

    cases = [
        (
            spoiled(lambda p: p["work"]["generate"]["rollout"].update(seconds="x")),
            "profiles.1.work.generate.rollout.seconds: 'x' is not a finite number",
        ),
        (
            spoiled(lambda p: p["link"].update(bytes_per_s=0)),
            "profiles.1.link.bytes_per_s: 0 must be above 0",
        ),
        (
            spoiled(lambda p: p["stages"].update(generate=-1.0)),
            "profiles.1.stages.generate: -1.0 must be at least 0",
        ),
        ([1, 2], "is not a placement profile"),
    ]
    for data, said in cases:
        path.write_text(json.dumps(data))
        with pytest.raises(SystemExit) as done:
            main(argv)
        assert done.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and said in err[0], err


def test_a_kept_profile_that_does_not_read_is_measured_anew(tmp_path, capsys):
    from rlcore.runners.profiling import load_profile, to_json

    config = load_config("embodied/cartpole_ppo")
    data = to_json({1: _flat_profile("embodied", {"collect": "rollout"})}, config)
    data["profiles"]["1"]["threads"] = "one"
    path = tmp_path / "kept.json"
    for written in (json.dumps(data), "[]"):
        path.write_text(written)
        assert load_profile(path, config) is None
        line = capsys.readouterr().err.strip()
        assert "measuring anew" in line and len(line.splitlines()) == 1
