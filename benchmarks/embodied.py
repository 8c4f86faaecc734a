"""Train a config for several seeds; one JSON line per seed, then a median line.

    python benchmarks/embodied.py [--config embodied/cartpole_ppo] [--seeds 1 2 3] [k=v ...]

Each line: time and env steps to the solved threshold (first eval whose mean reaches
``env.solved_threshold``, evals included in the time), throughput (env steps per second:
``sps`` over the whole run with evals, ``train_sps`` over collection and updates only), and the
final deterministic eval.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile

from rlcore.config import load_config
from rlcore.placement import plan_for_config
from rlcore.runners.embodied import EmbodiedRunner

KEYS = (
    "time_to_threshold_s",
    "steps_to_threshold",
    "sps",
    "train_sps",
    "wall_s",
    "eval_return_mean",
)


def train_seed(config_name: str, overrides: list[str], seed: int, out: str) -> dict:
    """One quiet run of ``config_name`` (no progress bar, no tensorboard) under ``out``; its
    summary. ``overrides`` come first, so the seed and output folder given here win."""
    config = load_config(
        config_name,
        [
            *overrides,
            f"runner.seed={seed}",
            "runner.progress=false",
            f"runner.output_dir={out}",
            "logger.tensorboard=false",
        ],
    )
    return EmbodiedRunner(config, plan_for_config(config)).run()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="embodied/cartpole_ppo")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as out:
        for seed in args.seeds:
            summary = train_seed(args.config, args.overrides, seed, out)
            row = {"config": args.config, "seed": seed, **{k: summary[k] for k in KEYS}}
            rows.append(row)
            print(json.dumps(row), flush=True)
    median = {"config": args.config, "seeds": args.seeds, "median": True}
    for k in KEYS:
        values = [r[k] for r in rows if r[k] is not None]
        median[k] = statistics.median(values) if len(values) == len(rows) else None
    median["solved"] = sum(r["steps_to_threshold"] is not None for r in rows)
    print(json.dumps(median))


if __name__ == "__main__":
    main()
