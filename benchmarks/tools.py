"""Multi-turn tool use (docs/agents.md): the shipped calculator task trained with and without
the calculator, alternated within each seed so both see the same machine load.

    python benchmarks/tools.py [k=v ...] [--config reasoning/tiny_calc_tools_grpo]
        [--seeds 1 2 3]

One JSON line per run: validation accuracy before and after, the wall seconds of the whole job
(the tiny model's build and warm-up included when it is not cached: ``prepare_s``), the rollout's
generated tokens per second (the model's own tokens over the generation stage, median over the
iterations after the first), and with tools the share of the generation stage spent in tool
calls and the turns and calls per trajectory. Then one line with the medians over seeds and the
accuracy gap in points.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

from rlcore.config import load_config
from rlcore.placement import plan_for_config
from rlcore.prepare import prepare
from rlcore.runners.supervisor import _ray_session, build_runner

SYSTEMS = {"tools": "[calculator]", "no-tools": "[]"}


def run(system: str, seed: int, args: argparse.Namespace, out: str) -> dict:
    start = time.perf_counter()
    config = load_config(
        args.config,
        [
            *args.overrides,
            f"rollout.tools={SYSTEMS[system]}",
            f"runner.seed={seed}",
            "runner.checkpoint_every=0",
            "runner.progress=false",
            f"runner.output_dir={out}",
        ],
    )
    plan = plan_for_config(config)
    models = prepare(config)
    prepared = time.perf_counter() - start
    seen: list[dict] = []
    with _ray_session(plan, None):
        runner = build_runner(config, plan, models)
        iterate = runner.iterate

        def recorded(iteration: int) -> dict:
            metrics = iterate(iteration)
            seen.append(dict(metrics))
            return metrics

        runner.iterate = recorded
        summary = runner.run()
    wall = time.perf_counter() - start
    steady = seen[1:] or seen
    line = {
        "system": system,
        "seed": seed,
        "val_accuracy_before": summary["val_accuracy_before"],
        "val_accuracy_after": summary["val_accuracy_after"],
        "iterations": summary["iterations"],
        "wall_s": round(wall, 1),
        "prepare_s": round(prepared, 1),
        "generated_tokens_per_s": round(
            statistics.median(m["perf/generated_tokens_per_s"] for m in steady), 1
        ),
    }
    if system == "tools":
        for name in ("tools/time_share", "num_turns/mean", "tools/calls_per_trajectory"):
            line[name] = round(statistics.median(m[name] for m in steady), 4)
    return line


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--config", default="reasoning/tiny_calc_tools_grpo")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    args = parser.parse_args()
    results: dict[str, list[dict]] = {s: [] for s in SYSTEMS}
    with tempfile.TemporaryDirectory() as out:
        for seed in args.seeds:
            for system in SYSTEMS:  # alternated within each seed
                result = run(system, seed, args, out)
                results[system].append(result)
                print(json.dumps(result), flush=True)
    medians = {
        s: {
            key: statistics.median(r[key] for r in runs)
            for key in ("val_accuracy_after", "wall_s", "generated_tokens_per_s")
        }
        for s, runs in results.items()
    }
    gap = medians["tools"]["val_accuracy_after"] - medians["no-tools"]["val_accuracy_after"]
    print(json.dumps({"medians": medians, "accuracy_gap_points": round(100 * gap, 1)}), flush=True)


if __name__ == "__main__":
    main()
