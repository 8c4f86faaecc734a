"""Embodied layouts side by side: throughput and where the time goes when components sit apart.

    python benchmarks/layouts.py [--steps 25600] [--repeats 2] [--config NAME] [k=v ...]

Runs the CartPole default config (or ``--config``, with the overrides given) for ``--steps`` env
steps (no stop at the threshold) in each layout (``--layouts``: all by default; ``-async``:
``runner.max_staleness=1``, the rollout collecting while the actor trains; ``all-apart``: a
process per component; ``-staged``: the envs in 2 pipeline stages), alternating layouts within
each repeat so that all see the same machine load. One JSON line per run, then one per layout
with medians:

- ``train_sps``: env steps per second over collection and updates (evals excluded);
- ``seconds_per_stage``: mean seconds per iteration in each stage (sync, collect, advantages,
  update, and the whole iteration);
- ``sync_share``: the weight sync's share of an iteration;
- ``apart_share``: the share of an iteration that the one-process layout does not spend,
  ``1 - iteration_s(one-process) / iteration_s(layout)``: Ray calls, serialisation, waiting on
  another process and (data-parallel) DDP's all-reduces, since the computation is the same.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile

from rlcore.config import load_config
from rlcore.placement import plan_for_config
from rlcore.runners.embodied import EmbodiedRunner

LAYOUTS = {
    "one-process": "{env:0,rollout:0,actor:0}",
    "env-apart": "{env:0,rollout:1,actor:1}",
    "rollout-apart": "{env:0,rollout:0,actor:1}",
    "data-parallel": "{env:all,rollout:all,actor:all}",
    # asynchronous (runner.max_staleness=1): the rollout collects while the actor trains
    "rollout-apart-async": "{env:0,rollout:0,actor:1}",
    # each component a process of its own (cluster.fuse_collocated=false), sync and async
    "all-apart": "{env:0,rollout:1,actor:1}",
    "all-apart-async": "{env:0,rollout:1,actor:1}",
    # ... with the envs in 2 pipeline stages (rollout.pipeline_stage_num=2): the env process
    # steps one stage while the rollout acts on the other
    "all-apart-staged": "{env:0,rollout:1,actor:1}",
    "all-apart-async-staged": "{env:0,rollout:1,actor:1}",
}
EXTRA = {
    "rollout-apart-async": ["runner.max_staleness=1"],
    "all-apart": ["cluster.fuse_collocated=false"],
    "all-apart-async": ["cluster.fuse_collocated=false", "runner.max_staleness=1"],
    "all-apart-staged": ["cluster.fuse_collocated=false", "rollout.pipeline_stage_num=2"],
    "all-apart-async-staged": [
        "cluster.fuse_collocated=false",
        "runner.max_staleness=1",
        "rollout.pipeline_stage_num=2",
    ],
}


def run(layout: str, steps: int, overrides: list[str], out: str, base: str) -> dict:
    config = load_config(
        base,
        [
            *overrides,
            "cluster.devices_per_node=2",
            f"cluster.component_placement={LAYOUTS[layout]}",
            *EXTRA.get(layout, []),
            f"runner.total_env_steps={steps}",
            "runner.stop_at_threshold=false",
            "runner.checkpoint_every=0",
            "runner.progress=false",
            f"runner.output_dir={out}",
            "logger.tensorboard=false",
        ],
    )
    summary = EmbodiedRunner(config, plan_for_config(config)).run()
    return {
        "layout": layout,
        "train_sps": summary["train_sps"],
        "eval_return_mean": summary["eval_return_mean"],
        "seconds_per_stage": summary["seconds_per_stage"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=25_600)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=list(LAYOUTS))
    parser.add_argument("--config", default="embodied/cartpole_ppo", help="the shipped config")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    rows: dict[str, list[dict]] = {name: [] for name in args.layouts}
    with tempfile.TemporaryDirectory() as out:
        for _ in range(args.repeats):
            for layout in args.layouts:
                row = run(layout, args.steps, args.overrides, out, args.config)
                rows[layout].append(row)
                print(json.dumps(row), flush=True)
    median = lambda values: statistics.median(values)  # noqa: E731
    base = median(
        [r["seconds_per_stage"]["iteration"] for r in rows.get("one-process", [])] or [math.nan]
    )
    for layout, runs in rows.items():
        stages = {
            s: median([r["seconds_per_stage"][s] for r in runs])
            for s in runs[0]["seconds_per_stage"]
        }
        print(
            json.dumps(
                {
                    "layout": layout,
                    "median": True,
                    "repeats": args.repeats,
                    "train_sps": median([r["train_sps"] for r in runs]),
                    "seconds_per_stage": stages,
                    "sync_share": round(stages.get("sync", 0.0) / stages["iteration"], 4),
                    "apart_share": round(1 - base / stages["iteration"], 4),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
