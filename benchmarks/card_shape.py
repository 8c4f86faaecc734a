"""The design card's actor-critic (a shared trunk, a Huber value loss weighed 2.0 on normalised
rewards: the default ``embodied/cartpole_ppo``) against a trunk per head
(``embodied/cartpole_ppo_separate_trunks`` with the default's ``env.normalize_reward``, so that
the shapes alone differ) on continuous-control tasks, each config only changing ``env.id``
(issue 50 point 7): one JSON line per run, the two shapes alternated seed by seed, then one line
per task and a last line.

    python benchmarks/card_shape.py [k=v ...] [--tasks ID ...] [--seeds 1 2 3] [--card k=v ...]

A task's score is the median final deterministic eval over the seeds; the card's share is its
score over the per-head score, both counted from a uniformly random policy's return (measured
here, 20 episodes), so that tasks with negative returns compare as those with positive ones:
``(card - random) / (per_head - random)``. Issue 50's target: at least 0.95 on every task.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from embodied import train_seed

SHAPES = {"card": "embodied/cartpole_ppo", "per_head": "embodied/cartpole_ppo_separate_trunks"}
# the per-head config keeps the default's earlier settings, raw rewards among them
SHAPE_OVERRIDES = {"card": [], "per_head": ["env.normalize_reward=true"]}
TASKS = (
    "InvertedPendulum-v5",
    "InvertedDoublePendulum-v5",
    "Reacher-v5",
    "Pendulum-v1",
    "Swimmer-v5",
)


def random_return(task: str, episodes: int = 20, seed: int = 0) -> float:
    """A uniformly random policy's mean episode return on ``task``."""
    import gymnasium as gym

    env = gym.make(task)
    env.action_space.seed(seed)
    total = 0.0
    for episode in range(episodes):
        env.reset(seed=seed + episode)
        done = False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total += float(reward)
            done = terminated or truncated
    env.close()
    return total / episodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("overrides", nargs="*", help="key=value for both shapes")
    parser.add_argument("--card", nargs="+", default=[], help="key=value for the card's only")
    args = parser.parse_args()
    shares = {}
    with tempfile.TemporaryDirectory() as out:
        for task in args.tasks:
            finals: dict[str, list[float]] = {shape: [] for shape in SHAPES}
            for seed in args.seeds:
                for shape, config in SHAPES.items():
                    extra = args.card if shape == "card" else []
                    overrides = [f"env.id={task}", *SHAPE_OVERRIDES[shape], *args.overrides, *extra]
                    summary = train_seed(config, overrides, seed, out)
                    final = summary["eval_return_mean"]
                    finals[shape].append(final)
                    row = {"task": task, "shape": shape, "seed": seed, "final_eval": final}
                    row |= {k: summary[k] for k in ("env_steps", "wall_s", "steps_to_threshold")}
                    print(json.dumps(row), flush=True)
            base = random_return(task)
            medians = {shape: statistics.median(v) for shape, v in finals.items()}
            share = (medians["card"] - base) / (medians["per_head"] - base)
            shares[task] = round(share, 3)
            row = {"task": task, "random": round(base, 2), "median_final": medians}
            print(json.dumps({**row, "card_share": shares[task]}), flush=True)
    print(
        json.dumps(
            {
                "summary": "card_shape",
                "overrides": args.overrides,
                "card_overrides": args.card,
                "seeds": args.seeds,
                "card_share": shares,
                "lowest": min(shares.values()),
                "target": 0.95,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
