"""Synchronous against asynchronous reasoning runs: samples/s and validation accuracy of the
default task in several layouts, alternated within each seed so all see the same machine load.

    python benchmarks/async_reasoning.py [k=v ...] [--iterations 30] [--seeds 1 2 3]
        [--systems one-process-t1 one-process-t2 apart-sync apart-async apart-async-partial]

(overrides before the options). Systems:

- ``one-process-t1`` / ``-t2``: the default placement (every component in the driver's
  process), 1 or 2 torch threads;
- ``apart-sync`` / ``apart-async``: ``--placement`` on ``--slots`` CPU slots, 1 torch thread a
  process, ``runner.max_staleness`` 0 or ``--staleness``; with ``--unfused`` each component in a
  process of its own (``cluster.fuse_collocated=false``), the OS sharing the cores among them;
- ``apart-async-partial``: ``apart-async`` with partial rollouts (``rollout.partial_rollout``,
  segments of ``--segment`` tokens), which take a weight update mid-generation.

One JSON line per run: ``iteration_s`` the median seconds of an iteration after the first two
(start-up and the pipeline's filling excluded), ``samples_per_s`` the responses an iteration
trains on over it, ``val_accuracy_after``, the staleness seen; then one line per system with
the medians over seeds and ``speedup`` against ``apart-sync`` and the best one-process system.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

from rlcore.config import load_config
from rlcore.placement import plan_for_config
from rlcore.runners.supervisor import _ray_session, build_runner

SYSTEMS = ("one-process-t1", "one-process-t2", "apart-sync", "apart-async", "apart-async-partial")


def overrides_of(system: str, args: argparse.Namespace) -> list[str]:
    if system.startswith("one-process"):
        return [f"runner.torch_threads={system[-1]}"]
    partial = system == "apart-async-partial"
    return [
        f"cluster.devices_per_node={args.slots}",
        f"cluster.component_placement={args.placement}",
        "runner.torch_threads=1",
        f"runner.max_staleness={0 if system == 'apart-sync' else args.staleness}",
        f"cluster.fuse_collocated={str(not args.unfused).lower()}",
        *(
            ["rollout.partial_rollout=true", f"rollout.partial_rollout_tokens={args.segment}"]
            if partial
            else []
        ),
    ]


def run(system: str, seed: int, args: argparse.Namespace, out: str) -> dict:
    config = load_config(
        args.config,
        [
            *args.overrides,
            *overrides_of(system, args),
            f"runner.seed={seed}",
            f"runner.total_iterations={args.iterations}",
            "runner.val_every=0",
            "runner.checkpoint_every=0",
            "runner.progress=false",
            f"runner.output_dir={out}",
        ],
    )
    plan = plan_for_config(config)
    with _ray_session(plan, None):
        runner = build_runner(config, plan)
        times: list[float] = []
        iterate = runner.iterate

        def timed(iteration: int) -> dict:
            start = time.perf_counter()
            metrics = iterate(iteration)
            times.append(time.perf_counter() - start)
            return metrics

        runner.iterate = timed
        summary = runner.run()
    steady = statistics.median(times[2:])
    samples = config.data.train_batch_size * config.algorithm.group_size
    return {
        "system": system,
        "seed": seed,
        "iteration_s": round(steady, 4),
        "samples_per_s": round(samples / steady, 2),
        "val_accuracy_before": summary["val_accuracy_before"],
        "val_accuracy_after": summary["val_accuracy_after"],
        **({"staleness": summary["async"]} if "async" in summary else {}),
        "seconds_per_stage": summary["seconds_per_stage"],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--config", default="reasoning/tiny_arith_ppo")
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--placement", default="{actor:0,ref:0,critic:1,rollout:1,reward:1}")
    parser.add_argument("--staleness", type=int, default=1)
    parser.add_argument("--segment", type=int, default=2, help="apart-async-partial's segment")
    parser.add_argument(
        "--unfused",
        action="store_true",
        help="apart systems: a process per component (cluster.fuse_collocated=false)",
    )
    args = parser.parse_args()
    results: dict[str, list[dict]] = {s: [] for s in args.systems}
    with tempfile.TemporaryDirectory() as out:
        for seed in args.seeds:
            for system in args.systems:  # alternated within each seed
                result = run(system, seed, args, out)
                results[system].append(result)
                print(json.dumps(result), flush=True)
    medians = {
        s: statistics.median(r["samples_per_s"] for r in runs) for s, runs in results.items()
    }
    best_one = max((v for s, v in medians.items() if s.startswith("one-process")), default=None)
    for system, runs in results.items():
        line = {
            "system": system,
            "median_samples_per_s": medians[system],
            "median_val_accuracy_after": statistics.median(r["val_accuracy_after"] for r in runs),
        }
        if "apart-sync" in medians:
            line["speedup_vs_apart_sync"] = round(medians[system] / medians["apart-sync"], 3)
        if best_one:
            line["speedup_vs_best_one_process"] = round(medians[system] / best_one, 3)
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
