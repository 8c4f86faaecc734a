"""What the reasoning driver reports: a training batch's metrics (under verl's names where verl
has the metric), the accuracy of scored responses, and the run's summary."""

from __future__ import annotations

from typing import Any

from tensordict import TensorDict

from rlcore.algorithms import explained_variance, masked_mean
from rlcore.columns import (
    ATTENTION_MASK,
    CORRECT,
    JUDGE_UNPARSED,
    JUDGED,
    LOSS_MASK,
    MODEL_SCORES,
    OVERLONG_PENALTY,
    REMOTE_FAILURES,
    RESPONSE_MASK,
    RETURNS,
    REWARD_COMPONENTS,
    SCORES,
    TIMED_OUT,
    TRAJECTORIES,
    UNPARSED,
    VALUES,
)
from rlcore.config.schema import ReasoningConfig
from rlcore.log import say


def accuracy(name: str, scored: TensorDict) -> dict[str, float]:
    """``{name: share of correct responses}`` over those the scorer gave a verdict on; empty
    when it gave none (a custom reward that returns bare numbers)."""
    judged = scored[JUDGED]
    if not judged.any():
        return {}
    return {name: float(scored[CORRECT][judged].float().mean())}


def batch_metrics(config: ReasoningConfig, batch: TensorDict, scored: TensorDict) -> dict:
    """The rewards, responses, padding and values of one training batch."""
    lengths = batch[RESPONSE_MASK].sum(-1).float()  # every response token, tools' included
    mask = batch[LOSS_MASK].bool()  # the model's own tokens
    metrics = {
        "reward/mean": float(scored[SCORES].mean()),
        **accuracy("reward/accuracy", scored),
        "reward/unparsed": float(scored[UNPARSED].float().mean()),
        "reward/timeouts": int(scored[TIMED_OUT].sum()),
        # kind model: the reward model's mean score (before reward.model.combine)
        **(
            {"reward/model_score": float(scored[MODEL_SCORES].nanmean())}
            if MODEL_SCORES in scored
            else {}
        ),
        # kind judge: answers of the judge that gave no score (scored 0)
        **(
            {"reward/judge_unparsed": int(scored[JUDGE_UNPARSED].sum())}
            if JUDGE_UNPARSED in scored
            else {}
        ),
        # kind remote: responses whose requests failed, scored 0 (reward.remote.on_error=zero)
        **(
            {"reward/remote_failures": int(scored[REMOTE_FAILURES].sum())}
            if REMOTE_FAILURES in scored
            else {}
        ),
        "response/length_mean": float(lengths.mean()),
        "response/clip_ratio": float((lengths == config.data.max_response_length).float().mean()),
        # the share of the passes' token positions that are padding (left of the prompts,
        # right of the responses up to the batch's longest)
        "perf/padding_share": 1.0 - float(batch[ATTENTION_MASK].float().mean()),
    }
    if OVERLONG_PENALTY in scored:
        penalty = scored[OVERLONG_PENALTY]
        metrics["reward/overlong_penalty_mean"] = float(penalty.mean())
        metrics["reward/overlong"] = float((penalty < 0).float().mean())
    if REWARD_COMPONENTS in scored:
        means = scored[REWARD_COMPONENTS].mean(0).tolist()
        for key, mean in zip(config.algorithm.gdpo_reward_keys, means, strict=True):
            metrics[f"reward/component/{key}_mean"] = mean
    if TRAJECTORIES in batch:
        metrics.update(trajectory_metrics(batch[TRAJECTORIES].tolist()))
    if VALUES in batch:
        values = batch[VALUES]
        metrics["critic/value_mean"] = float(masked_mean(values, mask))
        metrics["critic/vf_explained_var"] = float(explained_variance(values, batch[RETURNS], mask))
    return metrics


def trajectory_metrics(trajectories: list[dict[str, Any]]) -> dict[str, float]:
    """Multi-turn batches (docs/agents.md): turns (verl's ``num_turns/``), tool calls per
    trajectory by tool, tool errors, timeouts and malformed calls per trajectory, the share of
    trajectories ending at each limit, and the seconds spent in tool calls."""
    n = len(trajectories)
    turns = [t["turns"] for t in trajectories]
    metrics: dict[str, float] = {
        "num_turns/mean": sum(turns) / n,
        "num_turns/min": float(min(turns)),
        "num_turns/max": float(max(turns)),
        "tools/calls_per_trajectory": sum(len(t["calls"]) for t in trajectories) / n,
        "tools/errors_per_trajectory": sum(t["tool_errors"] for t in trajectories) / n,
        "tools/timeouts": float(sum(t["tool_timeouts"] for t in trajectories)),
        "tools/malformed_per_trajectory": sum(t["malformed_calls"] for t in trajectories) / n,
        "tools/hit_turn_limit": sum(t["stop"] == "turn_limit" for t in trajectories) / n,
        "tools/hit_token_limit": sum(t["stop"] == "token_limit" for t in trajectories) / n,
        "tools/seconds": sum(t["tool_s"] for t in trajectories),
    }
    names = sorted({c["name"] for t in trajectories for c in t["calls"] if not c["malformed"]})
    for name in names:
        count = sum(
            c["name"] == name and not c["malformed"] for t in trajectories for c in t["calls"]
        )
        metrics[f"tools/calls_per_trajectory/{name}"] = count / n
    if any(t["interactions"] for t in trajectories):
        metrics["interaction/replies_per_trajectory"] = (
            sum(t["interactions"] for t in trajectories) / n
        )
    return metrics


def throughput(metrics: dict, seconds: dict[str, float], batch: TensorDict) -> int:
    """Tokens per second of the iteration (``perf/tokens_per_s``: its prompt and response
    tokens over its stages' ``seconds``) and of generation (``perf/generated_tokens_per_s``,
    from ``sampling/generated_tokens``, which leaves ``metrics``, over the ``generate`` stage;
    an asynchronous iteration has none, its rollout generating beside the other stages: over
    the whole iteration); the tokens generated."""
    total = sum(seconds.values())
    metrics["perf/tokens_per_s"] = float(batch[ATTENTION_MASK].sum()) / max(total, 1e-9)
    generated = metrics.pop("sampling/generated_tokens")
    generating = seconds.get("generate")
    over = total if generating is None else generating
    metrics["perf/generated_tokens_per_s"] = generated / max(over, 1e-9)
    if "tools/seconds" in metrics and generating is not None:  # generation's share in tools
        metrics["tools/time_share"] = metrics["tools/seconds"] / max(generating, 1e-9)
    return int(generated)


def summary(runner: Any, wall_s: float, means: dict[str, float]) -> dict[str, Any]:
    """A ``ReasoningRunner``'s summary (``summary.json``; ``loop.train`` adds the stage times and
    restarts): validation before and after, throughput, padding, the data and the model."""
    progress, train_set, val_set = runner.progress, runner.train_set, runner.val_set
    # accuracy when the scorer gave verdicts at both validations (a custom reward may give them
    # for some responses and not others); else the mean reward, which both have
    both = progress.first_eval.keys() & progress.last_eval.keys()
    name = "accuracy" if "val/accuracy" in both else "reward_mean"
    before, after = progress.first_eval[f"val/{name}"], progress.last_eval[f"val/{name}"]
    say(
        f"validation {name.replace('_', ' ')}: {before:.3f} before PPO, {after:.3f} after "
        f"({len(val_set)} prompts, greedy)"
    )
    return {
        f"val_{name}_before": round(before, 4),
        f"val_{name}_after": round(after, 4),
        "val_prompts": len(val_set),
        "iterations": progress.iteration,
        "wall_s": round(wall_s, 3),
        # all: prompt and response tokens over the iteration; generated: over generation.
        "tokens_per_s": {
            name: round(means[f"perf/{metric}"], 1)
            for name, metric in (("all", "tokens_per_s"), ("generated", "generated_tokens_per_s"))
            if f"perf/{metric}" in means
        },
        "generated_tokens": runner.generated_tokens,
        "padding_share": round(means.get("perf/padding_share", 0.0), 4),
        # of the actor update's passes: micro-batches cut to their longest, or packed
        "update_padding_share": round(means.get("perf/update_padding_share", 0.0), 4),
        "train_prompts": len(train_set),
        "dropped_prompts": train_set.dropped + val_set.dropped,
        "model": str(runner.models.actor),
        "placement": runner.plan.layout,
        # resumed with runner.resume_changed_data on files that differ from the checkpoint's
        **({"resumed_on_changed_data": runner.changed_data} if runner.changed_data else {}),
        **(
            {"async": runner.pipeline.summary(runner.regenerated)}
            if runner.pipeline is not None and runner.pipeline.bound  # asynchronous
            else {}
        ),
    }
