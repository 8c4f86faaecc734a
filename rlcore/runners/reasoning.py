"""``ReasoningRunner``: PPO on a causal language model with rule rewards (single controller).

One iteration, as in verl's PPO:

1. take ``data.train_batch_size`` prompts; the rollout generates ``group_size`` responses each;
2. the reward worker scores them (1 for a right answer, ``format_score`` for a wrong one);
3. the actor recomputes the responses' log-probs (``old_log_probs``), the reference gives its
   own (for the KL), the critic its values;
4. the score goes on each response's last token; with ``use_kl_in_reward`` every token pays
   ``kl_coef * KL(actor || ref)``; the advantage estimator (``adv_type``) turns these into
   per-token advantages and returns;
5. the critic takes its clipped value-loss steps, then (after ``critic_warmup`` iterations) the
   actor its PPO steps, with the KL loss when ``use_kl_loss``;
6. the rollout engine gets the actor's new weights.

Every loss, advantage and KL comes from ``rlcore.algorithms``. Validation decodes greedily and
reports the share of right answers, before the first iteration and after the last.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from rlcore.algorithms import (
    build_kl_controller,
    get_advantage_fn,
    kl_penalty,
    masked_mean,
    masked_whiten,
)
from rlcore.config.schema import ReasoningConfig
from rlcore.data import PromptSet, arithmetic_problems, load_prompt_rows
from rlcore.models.lm import load_tokenizer
from rlcore.models.warmup import prepare_models
from rlcore.placement import PlacementPlan
from rlcore.placement.components import component_roles
from rlcore.runners.metrics import MetricsLogger
from rlcore.runners.reasoning_checkpoint import find_checkpoint, load_state, save_state
from rlcore.runners.reasoning_components import check_placement, make_components
from rlcore.workers.lm_batch import left_pad


def log(message: str) -> None:
    print(f"rlcore: {message}", file=sys.stderr, flush=True)


class Stopwatch:
    """Seconds per stage of the current iteration: ``with watch("generate"): ...``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def __call__(self, stage: str) -> Any:
        watch = self

        class _Stage:
            def __enter__(self) -> None:
                self.start = time.perf_counter()

            def __exit__(self, *exc: object) -> None:
                watch.seconds[stage] += time.perf_counter() - self.start

        return _Stage()


class ReasoningRunner:
    def __init__(self, config: ReasoningConfig, plan: PlacementPlan) -> None:
        self.config = config
        run = config.runner
        torch.manual_seed(run.seed)
        self.placed = set(component_roles(config).required)
        check_placement(config, plan, self.placed)
        self.dirs = prepare_models(config, log)
        self.tokenizer = load_tokenizer(self.dirs.actor)
        self.train_set = self._prompts(config.data.train_files, "data.train_files", train=True)
        self.val_set = self._prompts(config.data.val_files, "data.val_files", train=False)
        self.order = np.random.default_rng(run.seed)
        self.queue: list[int] = []
        alg = config.algorithm
        self.kl_ctrl = build_kl_controller(
            alg.kl_ctrl.type, alg.kl_ctrl.kl_coef, alg.kl_ctrl.target_kl, alg.kl_ctrl.horizon
        )
        self.advantage_fn = get_advantage_fn(alg.adv_type)
        self.progress: dict[str, Any] = {"iteration": 0, "elapsed_s": 0.0, "val_before": None}
        self.timings: list[dict[str, float]] = []  # this process's iterations: time/ and perf/
        resume = find_checkpoint(run.resume_dir) if run.resume_dir else None
        self.run_dir = resume.parent.parent if resume else Path(run.output_dir) / self._name()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.json").write_text(json.dumps(dataclasses.asdict(config), indent=2))
        self.components = make_components(config, self.dirs, plan, self.placed)
        if resume is not None:
            load_state(resume, self)
            log(f"resumed from {resume} at iteration {self.progress['iteration']}")

    def _name(self) -> str:
        data = (
            "arith"
            if not self.config.data.train_files
            else Path(self.config.data.train_files[0]).stem
        )
        stamp = time.strftime("%Y%m%d-%H%M%S")
        return self.config.runner.run_name or f"{data}-s{self.config.runner.seed}-{stamp}"

    # data --------------------------------------------------------------------------------------

    def _prompts(self, files: list[str], what: str, train: bool) -> PromptSet:
        data = self.config.data
        if files:
            rows = load_prompt_rows(
                files, what, data.prompt_key, data.answer_key, data.answer_format
            )
        else:
            syn = data.synthetic
            make = lambda n, seed, exclude=None: arithmetic_problems(  # noqa: E731
                n, digits=syn.digits, operations=syn.operations, seed=seed, exclude=exclude
            )
            train_rows = make(syn.num_train, syn.seed)
            rows = (
                train_rows
                if train
                else make(syn.num_val, syn.seed + 1, {r["question"] for r in train_rows})
            )
            rows = [
                {"prompt": r["question"], "answer": r["answer"].removeprefix("#### ")} for r in rows
            ]
        if not train and data.val_max_samples is not None:
            rows = rows[: data.val_max_samples]
        prompts = PromptSet.build(
            rows, self.tokenizer, suffix=data.prompt_suffix, chat_template=data.chat_template,
            max_length=data.max_prompt_length, what=what,
        )  # fmt: skip
        if prompts.dropped:
            log(f"{what}: dropped {prompts.dropped} of {len(rows)} prompts longer than "
                f"data.max_prompt_length={data.max_prompt_length} tokens")  # fmt: skip
        if train and len(prompts) < data.train_batch_size:
            from rlcore.data import DataError

            raise DataError(
                f"{what}: {len(prompts)} usable prompts, fewer than data.train_batch_size="
                f"{data.train_batch_size}"
            )
        return prompts

    def _next_prompts(self) -> list[int]:
        size = self.config.data.train_batch_size
        while len(self.queue) < size:
            n = len(self.train_set)
            epoch = self.order.permutation(n) if self.config.data.shuffle else np.arange(n)
            self.queue += epoch.tolist()
        picked, self.queue = self.queue[:size], self.queue[size:]
        return picked

    def _prompt_batch(self, rows: list[int], prompts: PromptSet, repeat: int) -> dict[str, Any]:
        ids = [prompts.prompts[i] for i in rows for _ in range(repeat)]
        input_ids, mask = left_pad(ids, self.tokenizer.pad_token_id)
        return {
            "input_ids": input_ids,
            "attention_mask": mask,
            "answers": [prompts.answers[i] for i in rows for _ in range(repeat)],
            # Groups are this batch's prompts by position: a prompt drawn twice (at an epoch's
            # end and the next one's start) makes two groups, not one of twice the size.
            "index": [k for k in range(len(rows)) for _ in range(repeat)],
        }

    # one iteration -----------------------------------------------------------------------------

    def iterate(self, iteration: int) -> dict[str, float]:
        cfg, alg, c = self.config, self.config.algorithm, self.components
        watch = Stopwatch()
        prompts = self._prompt_batch(self._next_prompts(), self.train_set, alg.group_size)
        with watch("generate"):
            batch = c.call("rollout", "generate", prompts, greedy=False)
        batch["answers"], index = prompts["answers"], prompts["index"]
        with watch("reward"):
            scored = c.call("reward", "score", batch)
        mask = batch["response_mask"]
        with watch("logprob"):
            batch["old_log_probs"] = c.call("actor", "compute_log_probs", batch)
        if "ref" in self.placed:
            with watch("ref"):
                batch["ref_log_probs"] = c.call("ref", "compute_log_probs", batch)
        if "critic" in self.placed:
            with watch("values"):
                batch["values"] = c.call("critic", "compute_values", batch)
        metrics: dict[str, float] = {}
        rewards = self._token_rewards(scored["scores"], batch, metrics)
        advantages, returns = self.advantage_fn(
            rewards, mask, values=batch.get("values"), index=index, gamma=alg.gamma,
            lam=alg.gae_lambda, norm_adv_by_std=alg.norm_adv_by_std,
        )  # fmt: skip
        if alg.normalize_advantages:
            advantages = masked_whiten(advantages, mask)
        batch["advantages"], batch["returns"] = advantages, returns
        if "critic" in self.placed:
            with watch("critic_update"):
                metrics.update(c.call("critic", "update", batch))
        if iteration > cfg.critic.critic_warmup:
            with watch("actor_update"):
                metrics.update(c.call("actor", "update", batch))
            with watch("sync"):
                c.sync()
        return self._metrics(metrics, batch, scored, watch)

    def _token_rewards(self, scores: torch.Tensor, batch: dict, metrics: dict) -> torch.Tensor:
        """The score on each response's last token, minus the in-reward KL when enabled."""
        alg, mask = self.config.algorithm, batch["response_mask"]
        last = (mask.sum(-1) - 1).clamp(min=0)
        rewards = torch.zeros(mask.shape, dtype=torch.float32)
        rewards[torch.arange(len(mask)), last] = scores
        if "ref_log_probs" in batch:
            kl = kl_penalty(batch["old_log_probs"], batch["ref_log_probs"], alg.kl_penalty) * mask
            per_response = (kl.sum(-1) / mask.sum(-1).clamp(min=1)).mean()
            metrics["kl/to_ref"] = float(masked_mean(kl, mask))
            if alg.use_kl_in_reward:
                rewards = rewards - self.kl_ctrl.value * kl
                metrics["kl/coef"] = self.kl_ctrl.value
                self.kl_ctrl.update(float(per_response), n_steps=len(mask))
        return rewards

    def _metrics(self, metrics: dict, batch: dict, scored: dict, watch: Stopwatch) -> dict:
        mask = batch["response_mask"].bool()
        lengths = mask.sum(-1).float()
        metrics["reward/mean"] = float(scored["scores"].mean())
        metrics["reward/accuracy"] = float(scored["correct"].float().mean())
        metrics["reward/unparsed"] = scored["unparsed"] / len(mask)
        metrics["reward/timeouts"] = scored["timeouts"]
        metrics["response/length_mean"] = float(lengths.mean())
        metrics["response/clip_ratio"] = float((lengths == mask.shape[1]).float().mean())
        if "values" in batch:
            values, returns = batch["values"][mask], batch["returns"][mask]
            metrics["critic/value_mean"] = float(values.mean())
            metrics["critic/explained_variance"] = float(
                1 - (returns - values).var() / returns.var().clamp_min(1e-8)
            )
        for stage, seconds in watch.seconds.items():
            metrics[f"time/{stage}_s"] = seconds
        total = sum(watch.seconds.values())
        tokens = float(batch["attention_mask"].sum())
        metrics["perf/tokens_per_s"] = tokens / max(total, 1e-9)
        metrics["perf/generated_tokens_per_s"] = float(lengths.sum()) / max(
            watch.seconds["generate"], 1e-9
        )
        return metrics

    # validation --------------------------------------------------------------------------------

    def validate(self) -> float:
        """Greedy accuracy on the validation prompts."""
        rows = list(range(len(self.val_set)))
        ranks = self.components.ranks["rollout"]
        padded = rows + rows[: (-len(rows)) % ranks]  # whole shards; the extras are dropped
        prompts = self._prompt_batch(padded, self.val_set, 1)
        batch = self.components.call("rollout", "generate", prompts, greedy=True)
        batch["answers"] = prompts["answers"]
        scored = self.components.call("reward", "score", batch)
        return float(scored["correct"][: len(rows)].float().mean())

    # the loop ----------------------------------------------------------------------------------

    def run(self) -> dict:
        cfg, run = self.config, self.config.runner
        logger = MetricsLogger(self.run_dir, tensorboard=cfg.logger.tensorboard,
                               wandb=cfg.logger.wandb, config=dataclasses.asdict(cfg))  # fmt: skip
        start = time.perf_counter() - self.progress["elapsed_s"]
        try:
            if self.progress["val_before"] is None:
                self.progress["val_before"] = self.validate()
                logger.log(0, {"val/accuracy": self.progress["val_before"]})
            log(f"validation accuracy before PPO: {self.progress['val_before']:.3f} "
                f"({len(self.val_set)} prompts, greedy)")  # fmt: skip
            bar = tqdm(total=run.total_iterations, initial=self.progress["iteration"],
                       disable=not run.progress, file=sys.stderr, unit="it")  # fmt: skip
            last_val = self.progress["val_before"]
            for iteration in range(self.progress["iteration"] + 1, run.total_iterations + 1):
                timer = time.perf_counter()
                metrics = self.iterate(iteration)
                metrics["time/iteration_s"] = time.perf_counter() - timer
                self.timings.append(
                    {k: v for k, v in metrics.items() if k.startswith(("time/", "perf/"))}
                )
                if (
                    run.val_every
                    and iteration % run.val_every == 0
                    and iteration < run.total_iterations
                ):
                    last_val = metrics["val/accuracy"] = self.validate()
                self.progress["iteration"] = iteration
                self.progress["elapsed_s"] = time.perf_counter() - start
                if run.checkpoint_every and (iteration % run.checkpoint_every == 0
                                             or iteration == run.total_iterations):  # fmt: skip
                    save_state(self)
                logger.log(iteration, metrics)
                bar.update(1)
                bar.set_postfix(acc=round(metrics["reward/accuracy"], 3), val=round(last_val, 3),
                                refresh=False)  # fmt: skip
            bar.close()
            after = self.validate()
            logger.log(run.total_iterations, {"val/accuracy": after})
        finally:
            logger.close()
            self.components.close()
        return self._summary(after, time.perf_counter() - start)

    def _summary(self, after: float, wall: float) -> dict:
        perf = _columns(self.timings, "perf/")
        summary = {
            "val_accuracy_before": round(self.progress["val_before"], 4),
            "val_accuracy_after": round(after, 4),
            "val_prompts": len(self.val_set),
            "iterations": self.progress["iteration"],
            "wall_s": round(wall, 3),
            # Means over this process's iterations (a resumed run: since it resumed).
            "seconds_per_stage": {
                k.removeprefix("time/").removesuffix("_s"): round(float(np.mean(v)), 4)
                for k, v in _columns(self.timings, "time/").items()
            },
            # all: prompt and response tokens over the iteration; generated: over generation.
            "tokens_per_s": {
                name: round(float(np.mean(perf[f"perf/{metric}"])), 1)
                for name, metric in (
                    ("all", "tokens_per_s"),
                    ("generated", "generated_tokens_per_s"),
                )
                if perf
            },
            "train_prompts": len(self.train_set),
            "dropped_prompts": self.train_set.dropped + self.val_set.dropped,
            "model": str(self.dirs.actor),
            "run_dir": str(self.run_dir),
        }
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        return summary


def _columns(rows: list[dict[str, float]], prefix: str) -> dict[str, list[float]]:
    columns: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        for name, value in row.items():
            if name.startswith(prefix):
                columns[name].append(value)
    return columns
