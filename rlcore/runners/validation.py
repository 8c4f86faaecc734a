"""Reasoning validation: the greedy answers' accuracy on the validation prompts and, beyond the
greedy answer, n samples per prompt (mean@n, pass@k), with the generations of the first prompts
written to the run folder for a reader (``validate``).

Metrics (``runner.val_n = n > 0``, verdicts from the scorer):

- ``val/mean@n``: the share of the n samples that are right, averaged over prompts;
- ``val/pass@k`` for k = 1 and k = n: the chance that at least one of k samples drawn from a
  prompt's n is right, by the unbiased estimator of Chen et al. 2021 (arXiv 2107.03374)
  ``1 - C(n - c, k) / C(n, k)`` with c the prompt's right samples, averaged over prompts
  (pass@1 equals mean@n; pass@n is the share of prompts with any right sample);
- ``val/reward_mean@n``: the mean score of the samples (also for a custom reward with no
  verdicts, which gives no mean@n or pass@k).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

from rlcore.columns import (
    CORRECT,
    JUDGE_OUTPUTS,
    JUDGED,
    RESPONSE_MASK,
    RESPONSES,
    SCORES,
    TRAJECTORIES,
)
from rlcore.runners.files import write_replacing


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of a prompt with ``c`` right answers among ``n`` samples."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")
    if n - c < k:  # every draw of k holds a right one
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def sample_metrics(scored: TensorDict, n: int) -> dict[str, float]:
    """The metrics above from ``scored`` rows of n samples per prompt, prompt by prompt."""
    metrics = {f"val/reward_mean@{n}": float(scored[SCORES].float().mean())}
    if not bool(scored[JUDGED].all()):
        return metrics
    right = scored[CORRECT].reshape(-1, n).sum(-1).tolist()
    metrics[f"val/mean@{n}"] = sum(c / n for c in right) / len(right)
    for k in sorted({1, n}):
        metrics[f"val/pass@{k}"] = sum(pass_at_k(n, c, k) for c in right) / len(right)
    return metrics


def _generation(tokenizer: Any, row: TensorDict) -> dict[str, Any]:
    response = row[RESPONSES][row[RESPONSE_MASK].bool()]
    verdict = bool(row[CORRECT]) if bool(row[JUDGED]) else None
    generation = {
        "response": tokenizer.decode(response, skip_special_tokens=True),
        "score": float(row[SCORES]),
        "correct": verdict,
    }
    if JUDGE_OUTPUTS in row:  # reward.kind judge: what the judge answered
        generation["judge"] = row[JUDGE_OUTPUTS]
    if TRAJECTORIES in row:  # multi-turn: the turns and tool answers, and how it stopped
        trajectory = row[TRAJECTORIES]
        generation["messages"], generation["stop"] = trajectory["messages"], trajectory["stop"]
    return generation


def write_generations(
    path: Path,
    tokenizer: Any,
    prompts: list[list[int]],
    answers: list[str],
    greedy: TensorDict,
    samples: TensorDict | None,
    n: int,
) -> None:
    """One JSON line per prompt: its text, answer, greedy generation and its n samples."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, (prompt, answer) in enumerate(zip(prompts, answers, strict=True)):
        line = {
            "prompt": tokenizer.decode(torch.tensor(prompt), skip_special_tokens=True),
            "answer": answer,
            "greedy": _generation(tokenizer, greedy[i]),
        }
        if samples is not None:
            line["samples"] = [_generation(tokenizer, samples[i * n + j]) for j in range(n)]
        lines.append(json.dumps(line) + "\n")
    write_replacing(path, "".join(lines))


def validate(
    config: Any,
    val_set: Any,
    tokenizer: Any,
    run_dir: Path,
    iteration: int,
    *,
    whole_shards: Callable[[list[int]], list[int]],
    greedy: Callable[[TensorDict], TensorDict],
    sample: Callable[[TensorDict, int], TensorDict],
    score: Callable[[TensorDict], TensorDict],
) -> dict[str, float]:
    """Greedy accuracy (``val/accuracy``, and ``val/reward_mean``) on ``val_set``; with
    ``runner.val_n`` = n, also n samples per prompt; the generations of the first
    ``runner.log_val_generations`` prompts to ``RUN/validation/iter_NNNNNN.jsonl``.

    ``whole_shards``: the rows padded to whole shards of the rollout and reward ranks;
    ``greedy`` / ``sample(prompts, seed)``: the rollout's responses; ``score``: the reward's.
    """
    from rlcore.data.sampler import prompt_batch
    from rlcore.runners.reasoning_metrics import accuracy

    run, pad = config.runner, tokenizer.pad_token_id
    rows = list(range(len(val_set)))
    padded = whole_shards(rows)
    prompts = prompt_batch(padded, val_set, 1, pad)
    answered = prompts.update(greedy(prompts))
    answered = answered.update(score(answered))[: len(rows)]
    metrics = {
        "val/reward_mean": float(answered[SCORES].mean()),
        **accuracy("val/accuracy", answered),
    }
    n, samples = run.val_n, None
    if n:
        many = prompt_batch(padded, val_set, n, pad)
        many.update(sample(many, run.seed + iteration))
        samples = many.update(score(many))[: len(rows) * n]
        metrics.update(sample_metrics(samples, n))
    shown = rows[: run.log_val_generations]
    if shown:
        where = run_dir / "validation" / f"iter_{iteration:06d}.jsonl"
        texts = [val_set.prompts[i] for i in shown]
        answers = [val_set.answers[i] for i in shown]
        write_generations(where, tokenizer, texts, answers, answered, samples, n)
    return metrics
