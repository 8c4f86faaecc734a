"""The placement advisor's predictions against measured runs: the advisor's top candidates for a
config, each run for a few iterations, alternated within each repeat (issue 52's check).

    python benchmarks/placement_advice.py --config NAME [k=v ...] [--top 3] [--repeats 3]
        [--iterations 12] [--also-one-process]
    python benchmarks/placement_advice.py --config NAME --cluster FILE --profile-file P.json
        [--throughput X]          (on paper: the advisor's JSON line from P, nothing run)

(overrides before the options). The advisor profiles the config first (``rlcore placement
--advise``: kept in ``runner.output_dir/placement/``, reused when present). Each run iterates
the candidate's layout directly (no evaluation, no checkpoint); ``measured_s`` is the median
seconds of an iteration after the first two (start-up and a pipeline's filling excluded).
One JSON line per run, then one per candidate: predicted and median measured seconds, the
prediction's error (``predicted / measured - 1``), and last a line saying whether every
prediction is within 20% and the advisor's pick within 10% of the fastest measured.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from rlcore.config import load_config
from rlcore.config.load import replace_keys
from rlcore.placement import plan_for_config
from rlcore.placement.advise import Ranked, json_line, placement_text, rank, valid_candidates
from rlcore.placement.cost import scaled
from rlcore.runners.profiling import advise, read_profile_file
from rlcore.runners.supervisor import _ray_session, build_runner


def measure(config, ranked: Ranked, iterations: int, out: str) -> list[float]:
    run = {
        **ranked.candidate.config_keys(config.mode),
        "runner.checkpoint_every": 0,
        "runner.progress": False,
        "runner.output_dir": out,
        "runner.resume": "never",
        "runner.run_name": None,
    }
    if config.mode == "embodied":
        run["runner.total_env_steps"] = (
            (iterations + 1) * config.runner.rollout_steps * config.env.num_envs
        )
    else:
        run["runner.total_iterations"] = iterations + 1
    config = replace_keys(config, run)
    plan = plan_for_config(config)
    times = []
    with _ray_session(plan, None):
        runner = build_runner(config, plan)
        try:
            for i in range(1, iterations + 1):
                start = time.perf_counter()
                runner.iterate(i)
                times.append(time.perf_counter() - start)
        finally:
            runner.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--config", default="embodied/cartpole_ppo")
    parser.add_argument("--top", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--profile-iterations", type=int, default=3)
    parser.add_argument("--remeasure", action="store_true", help="profile anew")
    parser.add_argument(
        "--also-one-process", action="store_true", help="run the best one-process layout too"
    )
    parser.add_argument("--cluster", type=Path, help="a cluster file (rlcore placement's)")
    parser.add_argument(
        "--profile-file",
        type=Path,
        help="on paper: rank from this profile, print the advisor's JSON line, run nothing",
    )
    parser.add_argument("--throughput", type=float, default=1.0, help="with --profile-file")
    args = parser.parse_args()
    config = load_config(args.config, args.overrides, cluster_file=args.cluster)
    if args.profile_file is not None:  # a cluster this machine cannot see: nothing to run
        profiles = read_profile_file(args.profile_file, config)
        profiles = {t: scaled(p, args.throughput) for t, p in profiles.items()}
        print(json_line(rank(valid_candidates(config, tuple(profiles)), profiles)))
        return
    ranked = advise(config, args.remeasure, args.profile_iterations)
    chosen = list(ranked[: args.top])
    if args.also_one_process:
        alone = next(r for r in ranked if r.candidate.processes() == 1)
        if alone not in chosen:
            chosen.append(alone)
    measured: dict[int, list[float]] = {i: [] for i in range(len(chosen))}
    with tempfile.TemporaryDirectory() as out:
        for repeat in range(args.repeats):
            for i, r in enumerate(chosen):  # alternated within each repeat
                times = measure(config, r, args.iterations, out)
                steady = statistics.median(times[2:])
                measured[i].append(steady)
                line = {
                    "repeat": repeat,
                    "candidate": i,
                    "placement": placement_text(r.candidate),
                    "measured_s": round(steady, 5),
                    "iteration_s": [round(t, 4) for t in times],
                }
                print(json.dumps(line), flush=True)
    rows = []
    for i, r in enumerate(chosen):
        c = r.candidate
        got = statistics.median(measured[i])
        rows.append(
            {
                "config": args.config,
                "candidate": i,
                "placement": placement_text(c),
                "fuse_collocated": c.fused,
                "max_staleness": c.max_staleness,
                "pipeline_stage_num": c.pipeline_stage_num,
                "torch_threads": c.torch_threads,
                "predicted_s": round(r.prediction.iteration_s, 5),
                "measured_s": round(got, 5),
                "error": round(r.prediction.iteration_s / got - 1, 3),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    fastest = min(row["measured_s"] for row in rows)
    print(
        json.dumps(
            {
                "config": args.config,
                "all_within_20pct": all(abs(row["error"]) <= 0.2 for row in rows),
                "max_abs_error": max(abs(row["error"]) for row in rows),
                "pick_over_fastest": round(rows[0]["measured_s"] / fastest, 3),
                "pick_within_10pct": rows[0]["measured_s"] <= 1.1 * fastest,
            }
        )
    )


if __name__ == "__main__":
    main()
