"""The training loop both embodied drivers share: in one process, or over data-parallel ranks.

``train`` calls ``iterate(i)`` for each iteration, ``evaluate(seed)`` every ``eval_every``
iterations and at the end, ``save()`` every ``checkpoint_every`` iterations (when given), logs
metrics, shows progress, and returns (and writes) the run's summary.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from rlcore.config.schema import EmbodiedConfig
from rlcore.runners.metrics import MetricsLogger


def new_progress() -> dict[str, Any]:
    """What the loop carries from iteration to iteration; checkpoints save it."""
    return {"iteration": 0, "env_steps": 0, "elapsed_s": 0.0, "train_s": 0.0, "reached": None,
            "eval_returns": np.zeros(0)}  # fmt: skip


def num_iterations(config: EmbodiedConfig) -> int:
    """Iterations to reach ``runner.total_env_steps``, all ranks' envs together."""
    return max(
        1, config.runner.total_env_steps // (config.runner.rollout_steps * config.env.num_envs)
    )


def run_name(config: EmbodiedConfig) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return (
        config.runner.run_name or f"{config.env.id.replace(':', '.')}-s{config.runner.seed}-{stamp}"
    )


def train(
    config: EmbodiedConfig,
    *,
    iterate: Callable[[int], dict],
    evaluate: Callable[[int], np.ndarray],
    save: Callable[[], Any] | None,
    run_dir: Path,
    progress: dict[str, Any],
    ranks: int = 1,
) -> dict:
    run = config.runner
    batch = run.rollout_steps * config.env.num_envs  # all ranks together
    iterations = num_iterations(config)
    logger = MetricsLogger(
        run_dir,
        tensorboard=config.logger.tensorboard,
        wandb=config.logger.wandb,
        config=dataclasses.asdict(config),
    )
    bar = tqdm(total=iterations * batch, initial=progress["env_steps"], disable=not run.progress,
               file=sys.stderr, unit="step", dynamic_ncols=True)  # fmt: skip
    start = time.perf_counter() - progress["elapsed_s"]  # wall time counts across resumes
    threshold = config.env.solved_threshold
    shown: dict[str, float] = {}  # the latest episode and eval returns, for the progress bar
    try:
        for iteration in range(progress["iteration"] + 1, iterations + 1):
            timer = time.perf_counter()
            metrics = iterate(iteration)
            seconds = time.perf_counter() - timer
            metrics["sps"] = batch / seconds
            progress["train_s"] += seconds
            progress["iteration"] = iteration
            progress["env_steps"] += batch
            last = iteration == iterations
            if (run.eval_every and iteration % run.eval_every == 0) or last:
                timer = time.perf_counter()
                progress["eval_returns"] = evaluate(run.seed + 10_000 + iteration)
                mean = float(progress["eval_returns"].mean())
                metrics["eval_return"] = mean
                metrics["time/eval_s"] = time.perf_counter() - timer
                if threshold is not None and progress["reached"] is None and mean >= threshold:
                    progress["reached"] = (time.perf_counter() - start, progress["env_steps"])
                    last = last or run.stop_at_threshold
            progress["elapsed_s"] = time.perf_counter() - start
            if (
                save is not None
                and run.checkpoint_every
                and (iteration % run.checkpoint_every == 0 or last)
            ):
                save()
            logger.log(progress["env_steps"], metrics)
            bar.update(batch)
            for key, name in (("episode_return", "ret"), ("eval_return", "eval")):
                if key in metrics:
                    shown[name] = round(metrics[key], 1)
            bar.set_postfix(shown, refresh=False)
            if last:
                break
    finally:
        bar.close()
        logger.close()
    return write_summary(config, progress, time.perf_counter() - start, run_dir, ranks)


def write_summary(
    config: EmbodiedConfig, progress: dict, wall: float, run_dir: Path, ranks: int
) -> dict:
    reached, eval_returns = progress["reached"], progress["eval_returns"]
    summary = {
        "env_id": config.env.id,
        "eval_return_mean": float(eval_returns.mean()) if len(eval_returns) else None,
        "eval_return_std": float(eval_returns.std()) if len(eval_returns) else None,
        "env_steps": progress["env_steps"],
        "iterations": progress["iteration"],
        "wall_s": round(wall, 3),
        "sps": round(progress["env_steps"] / wall, 1),
        # Training throughput: collection and updates only, without evals and checkpoints.
        "train_sps": round(progress["env_steps"] / max(progress["train_s"], 1e-9), 1),
        "solved_threshold": config.env.solved_threshold,
        "time_to_threshold_s": None if reached is None else round(reached[0], 3),
        "steps_to_threshold": None if reached is None else reached[1],
        "actor_ranks": ranks,
        "run_dir": str(run_dir),
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary
