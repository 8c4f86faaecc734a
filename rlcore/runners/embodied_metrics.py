"""An embodied run's metrics: a collected batch's (``batch_metrics``) and the run's summary
(``summary``, ``summary.json``)."""

from __future__ import annotations

from typing import Any

from tensordict import TensorDict

from rlcore.algorithms import explained_variance
from rlcore.columns import LOSS_MASK, RETURNS, VALUES


def batch_metrics(batch: TensorDict) -> dict[str, float]:
    """The value function's explained variance over the batch's valid steps, and the mean
    return and length of the episodes that ended in it (none when none did), and the share
    that succeeded when the env reports success."""
    metrics = {
        "critic/vf_explained_var": float(
            explained_variance(batch[VALUES], batch[RETURNS], batch[LOSS_MASK])
        )
    }
    episodes = int(batch["episode_count"].sum())
    if episodes:
        metrics["env/episode_return"] = float(batch["episode_return_sum"].sum()) / episodes
        metrics["env/episode_length"] = float(batch["episode_length_sum"].sum()) / episodes
        if "episode_success_sum" in batch:  # an env that reports success
            metrics["env/success_rate"] = float(batch["episode_success_sum"].sum()) / episodes
    return metrics


def summary(runner: Any, wall_s: float, means: dict[str, float]) -> dict[str, Any]:
    """An ``EmbodiedRunner``'s summary (``loop.train`` adds the stage times and restarts): the
    last evaluation, steps and throughput, when the return reached the threshold, the layout."""
    p, last, ahead = runner.progress, runner.progress.last_eval, runner.ahead
    grouped = runner.config.algorithm.group_size > 1
    return {
        "env_id": runner.config.env.id,
        "eval_return_mean": last.get("eval/return_mean"),
        "eval_return_std": last.get("eval/return_std"),
        # the share of episodes that ended in success, for an env that reports it
        **({"eval_success_rate": last["eval/success_rate"]} if "eval/success_rate" in last else {}),
        "env_steps": p.samples,
        "iterations": p.iteration,
        "wall_s": round(wall_s, 3),
        "sps": round(p.samples / wall_s, 1),
        # Training throughput: collection and updates only, without evals and checkpoints.
        "train_sps": round(p.samples / max(p.train_s, 1e-9), 1),
        "solved_threshold": runner.threshold,
        "time_to_threshold_s": None if p.reached_s is None else round(p.reached_s, 3),
        "steps_to_threshold": p.reached_samples,
        "placement": runner.plan.layout,
        "actor_ranks": runner.components.world_size("actor"),
        # Resumed with the envs' own state (pickle), or with groups (each collection resets
        # its envs), the run equals one never stopped.
        "resume_bit_exact": None
        if runner.resumed_from is None
        else (runner.config.env.checkpoint_state == "pickle" or grouped) and ahead is None,
        **({} if ahead is None else {"async": ahead.summary(runner.regenerated)}),
    }
