"""Baseline for the CartPole target: Stable-Baselines3 PPO with rl-zoo's CartPole-v1 settings.

Run it in its own environment (SB3 is not an rlcore dependency):

    python3 -m venv /tmp/sb3 && /tmp/sb3/bin/pip install torch==2.13.0 stable-baselines3
    /tmp/sb3/bin/python benchmarks/sb3_cartpole.py --seeds 1 2 3

Evaluates every 2048 steps over 10 deterministic episodes and stops at a mean of 475, timing
from the start of learning (evals included), as benchmarks/embodied.py reports for rlcore.
One JSON line per seed, then a median line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import EvalCallback, StopTrainingOnRewardThreshold
from stable_baselines3.common.env_util import make_vec_env


def linear(start: float):
    return lambda progress_remaining: progress_remaining * start


def run(seed: int, threshold: float) -> dict:
    envs = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    eval_envs = make_vec_env("CartPole-v1", n_envs=1, seed=seed + 10_000)
    model = PPO(
        "MlpPolicy",
        envs,
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=20,
        ent_coef=0.0,
        learning_rate=linear(1e-3),
        clip_range=linear(0.2),
        seed=seed,
        verbose=0,
    )
    stop = StopTrainingOnRewardThreshold(reward_threshold=threshold, verbose=0)
    callback = EvalCallback(
        eval_envs,
        eval_freq=2048 // 8,
        n_eval_episodes=10,
        deterministic=True,
        callback_on_new_best=stop,
        verbose=0,
    )
    start = time.perf_counter()
    model.learn(total_timesteps=100_000, callback=callback)
    wall = time.perf_counter() - start
    solved = callback.best_mean_reward >= threshold
    return {
        "baseline": "sb3-ppo-rlzoo",
        "seed": seed,
        "time_to_threshold_s": round(wall, 3) if solved else None,
        "steps_to_threshold": model.num_timesteps if solved else None,
        "sps": round(model.num_timesteps / wall, 1),
        "best_eval": callback.best_mean_reward,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = [run(seed, 475.0) for seed in args.seeds]
    for row in rows:
        print(json.dumps(row), flush=True)
    times = [r["time_to_threshold_s"] for r in rows if r["time_to_threshold_s"] is not None]
    median = statistics.median(times) if len(times) == len(rows) else None
    print(
        json.dumps(
            {
                "baseline": "sb3-ppo-rlzoo",
                "median_time_to_threshold_s": median,
                "median_sps": statistics.median(r["sps"] for r in rows),
                "threads": args.threads,
            }
        )
    )


if __name__ == "__main__":
    main()
