"""``ReasoningRunner``: PPO on a causal language model with rule rewards, driven by a single
controller over the ``rollout``, ``reward``, ``actor``, ``critic`` and ``ref`` components (each
where ``cluster.component_placement`` puts it; the default: all in the driver's process, the
rollout generating with the actor's own module).

One iteration, as in verl's PPO:

1. sync: the rollout gets the actor's latest weights (nothing to copy when it shares the module);
2. take ``data.train_batch_size`` prompts; the rollout generates ``group_size`` responses each;
3. the reward worker scores them (1 for a right answer, ``format_score`` for a wrong one);
4. the actor recomputes the responses' log-probs (``old_log_probs``; with the sum of squared
   token probabilities for the optimal token baselines), the reference gives its own (for the
   KL), the critic its values; for ReMax the rollout answers each prompt greedily once and the
   reward scores that (the baseline);
5. the score goes on each response's last token; with ``use_kl_in_reward`` every token pays
   ``kl_coef * KL(actor || ref)``; the estimator (``adv_type``) turns these into per-token
   advantages and returns, whitened when ``normalize_advantages`` (``rlcore.algorithms``);
6. the critic takes its clipped value-loss steps, then (after ``critic_warmup`` iterations) the
   actor its PPO steps, with the KL loss when ``use_kl_loss``.

Validation decodes greedily and reports the share of right answers, before the first iteration,
every ``val_every`` iterations and after the last.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from tensordict import TensorDict

from rlcore.algorithms import (
    ADVANTAGES,
    INPUTS,
    apply_kl_penalty,
    build_kl_controller,
    compute_advantages,
    explained_variance,
    kl_penalty,
    masked_mean,
    scores_to_token_rewards,
)
from rlcore.config.errors import ConfigError
from rlcore.config.schema import ReasoningConfig
from rlcore.data.sampler import PromptSampler, load_prompt_set, prompt_batch
from rlcore.data.sequences import concat_generated, trim_padding
from rlcore.log import say
from rlcore.models.lm import load_tokenizer
from rlcore.models.warmup import prepare_models
from rlcore.placement import PlacementPlan
from rlcore.rewards import RewardWorker
from rlcore.runners.checkpoint import load_checkpoint, open_run_folder, save_checkpoint
from rlcore.runners.loop import Schedule, train
from rlcore.runners.progress import Progress, Stopwatch
from rlcore.runners.validation import sample_metrics, write_generations
from rlcore.scheduler.deployment import ComponentSpec, start_components
from rlcore.scheduler.handles import Peer
from rlcore.workers.lm_actor import LMActor, LMCritic, LMReference
from rlcore.workers.rollout import RolloutWorker


class ReasoningRunner:
    """See the module docstring. ``plan`` comes from ``plan_for_config(config)``."""

    def __init__(self, config: ReasoningConfig, plan: PlacementPlan) -> None:
        self.config, self.plan = config, plan
        run, alg = config.runner, config.algorithm
        torch.set_num_threads(run.torch_threads)
        torch.manual_seed(run.seed)
        self.dirs = prepare_models(config, say)
        self.tokenizer = load_tokenizer(self.dirs.actor)
        self.train_set = load_prompt_set(config, self.tokenizer, train=True, log=say)
        self.val_set = load_prompt_set(config, self.tokenizer, train=False, log=say)
        self.sampler = PromptSampler(len(self.train_set), run.seed, config.data.shuffle)
        self.kl_ctrl = build_kl_controller(
            alg.kl_ctrl.type, alg.kl_ctrl.kl_coef, alg.kl_ctrl.target_kl, alg.kl_ctrl.horizon
        )
        data = config.data.train_files[0] if config.data.train_files else "arith"
        self.run_dir, resume_from = open_run_folder(config, data.rsplit("/", 1)[-1].split(".")[0])
        self.restarts: list[dict[str, Any]] = []  # set by the supervisor after a lost worker
        self.components = start_components(plan, config.cluster, config.sync)
        try:
            self._launch()
            self.progress = Progress()
            self.version = 0  # of the actor's weights: one per actor update
            self.generated_tokens = 0  # response tokens generated for training, dropped included
            if resume_from is not None:
                self.progress, state = load_checkpoint(
                    resume_from, config, self._saved(), self._world_sizes()
                )
                self.sampler.load_state_dict(state["sampler"])
                self.kl_ctrl.load_state_dict(state["kl_ctrl"])
                self.version = state["version"]
                self.generated_tokens = state.get("generated_tokens", 0)
                say(f"resumed from {resume_from} at iteration {self.progress.iteration}")
        except BaseException:
            self.components.close()
            raise
        self.schedule = Schedule(
            iterations=run.total_iterations,
            samples_per_iteration=config.data.train_batch_size * alg.group_size,
            eval_every=run.val_every,
            eval_first=True,
            eval_metric="val/accuracy",
            checkpoint_every=run.checkpoint_every,
            threshold=None,
            stop_at_threshold=False,
            show_progress=run.progress,
            log_by_samples=False,
            postfix={"reward/accuracy": "acc", "val/accuracy": "val"},
        )

    def _launch(self) -> None:
        config, dirs = self.config, self.dirs
        self.placed = set(self.plan.components)
        fused_actor = {"actor": Peer("actor", local_only=True)}  # its module, when fused
        # whether the actor trains on the rollout's GPUs (an sglang engine then gives its memory
        # back while it does)
        collocated = bool(self.plan.device_set("actor") & self.plan.device_set("rollout"))
        specs = [
            ComponentSpec("actor", LMActor, (config, dirs.actor)),
            ComponentSpec(
                "rollout",
                RolloutWorker,
                (config, dirs.actor),
                {**fused_actor, "collocated": collocated},
            ),
            ComponentSpec("reward", RewardWorker, (config, dirs.actor)),
        ]
        if "critic" in self.placed:
            specs.append(ComponentSpec("critic", LMCritic, (config, dirs.critic)))
        if "ref" in self.placed:
            specs.append(ComponentSpec("ref", LMReference, (config, dirs.actor)))
        handles = self.components.launch_all(specs)
        built = {spec.name: handle for spec, handle in zip(specs, handles, strict=True)}
        self.actor: LMActor = built["actor"]
        self.rollout: RolloutWorker = built["rollout"]
        self.reward: RewardWorker = built["reward"]
        self.critic: LMCritic | None = built.get("critic")
        self.ref: LMReference | None = built.get("ref")
        # The rollout's recorded log-probs are the old log-probs when it samples with the
        # actor's own module (and the estimator needs no other output of that pass).
        self.inputs = ADVANTAGES.entry(config.algorithm.adv_type).traits["inputs"]
        self.reuse_log_probs = (
            not config.actor.recompute_log_probs
            and "sum_pi_squared" not in self.inputs
            and self.rollout.generates_with_the_actor()
        )

    def _saved(self) -> dict[str, Any]:
        saved = {"actor": self.actor, "rollout": self.rollout}
        return saved if self.critic is None else {**saved, "critic": self.critic}

    def _world_sizes(self) -> dict[str, int]:
        return {name: self.components.world_size(name) for name in sorted(self.placed)}

    # one iteration -----------------------------------------------------------------------------

    def iterate(self, iteration: int) -> dict[str, float]:
        cfg = self.config
        watch = Stopwatch()
        with watch("sync"):
            self._sync()
        batch, scored, metrics = self._generate(watch)
        batch = trim_padding(batch)  # no pass pays for columns that are padding in every row
        inputs = self.inputs  # what the estimator reads besides the rewards
        if self.reuse_log_probs:  # recorded while sampling with the actor's module
            batch.rename_key_("rollout_log_probs", "old_log_probs")
        else:
            with watch("logprob"):
                if "sum_pi_squared" in inputs:
                    batch.update(self.actor.compute_log_probs_and_sum_pi_squared(batch))
                else:
                    batch["old_log_probs"] = self.actor.compute_log_probs(batch)
        if "reward_baselines" in inputs:
            with watch("generate_baseline"):
                batch["reward_baselines"] = self._greedy_baselines(batch)
            metrics["reward/greedy_baseline_mean"] = float(batch["reward_baselines"].mean())
        self.rollout.release_memory()  # generation is done: a collocated sglang engine's
        if self.ref is not None:
            with watch("ref"):
                batch["ref_log_probs"] = self.ref.compute_log_probs(batch)
        elif cfg.algorithm.kl_loss_on or cfg.algorithm.kl_reward_on:  # LoRA: base = reference
            with watch("ref"):
                batch["ref_log_probs"] = self.actor.compute_ref_log_probs(batch)
        if self.critic is not None:
            with watch("values"):
                batch["values"] = self.critic.compute_values(batch)
        with watch("advantages"):
            self._advantages(batch, scored, metrics)
        if self.critic is not None:
            with watch("critic_update"):
                metrics.update(self.critic.update(batch))
        if iteration > cfg.critic.critic_warmup:
            with watch("actor_update"):
                metrics.update(self.actor.update(batch))
            # the run's summary averages perf/ metrics: this one under that name too
            metrics["perf/update_padding_share"] = metrics["actor/padding_share"]
            self.version += 1
        metrics.update(self._batch_metrics(batch, scored))
        metrics.update(watch.metrics())
        total = sum(watch.seconds.values())
        metrics["perf/tokens_per_s"] = float(batch["attention_mask"].sum()) / max(total, 1e-9)
        generated = metrics.pop("sampling/generated_tokens")
        self.generated_tokens += int(generated)
        metrics["perf/generated_tokens_per_s"] = generated / max(watch.seconds["generate"], 1e-9)
        return metrics

    def _generate(self, watch: Stopwatch) -> tuple[TensorDict, TensorDict, dict[str, float]]:
        """One batch of groups, generated and scored. With DAPO's dynamic sampling
        (``algorithm.filter_groups``), groups whose responses all score alike (no signal for a
        group baseline) are dropped and more prompts generated until ``data.train_batch_size``
        groups are kept, at most ``max_num_gen_batches`` generation batches; the extra kept
        groups of the last one are left out (as verl does)."""
        cfg, alg = self.config, self.config.algorithm
        wanted, size, pad = cfg.data.train_batch_size, alg.group_size, self.tokenizer.pad_token_id
        rule = alg.filter_groups
        kept: list[tuple[TensorDict, TensorDict]] = []
        groups = generations = generated = 0
        while True:
            prompts = prompt_batch(self.sampler.next(wanted), self.train_set, size, pad)
            prompts["index"] += generations * wanted  # one id per group over all the batches
            with watch("generate"):
                batch = prompts.update(
                    self.rollout.generate(prompts, self.version, log_probs=self.reuse_log_probs)
                )
            with watch("reward"):
                scored = self.reward.score(batch)
            generations += 1
            generated += int(batch["response_mask"].sum())
            if not rule.enable:
                return batch, scored, {"sampling/generated_tokens": float(generated)}
            varied = varied_groups(scored, rule.metric, size)
            kept.append((batch[varied], scored[varied]))
            groups += int(varied.sum()) // size
            if groups >= wanted:
                break
            if rule.max_num_gen_batches and generations >= rule.max_num_gen_batches:
                raise ConfigError(
                    f"algorithm.filter_groups: {generations} generation batches kept {groups} of "
                    f"the {wanted} groups wanted with varied {rule.metric}; the prompts are too "
                    "hard or too easy for the policy: raise max_num_gen_batches (0 = no limit) "
                    "or change the data"
                )
        rows = wanted * size
        batch = concat_generated([b for b, _ in kept], pad)[:rows]
        scored = torch.cat([s for _, s in kept])[:rows]
        metrics = {
            "sampling/generation_batches": float(generations),
            "sampling/kept_group_share": groups / (generations * wanted),
            "sampling/generated_tokens": float(generated),
        }
        return batch, scored, metrics

    def _sync(self) -> None:
        if self.rollout.resume_memory():  # an engine that gave its memory back while training
            self.components.forget_weights("rollout")
        self.components.sync_weights("actor", "rollout", self.version)

    def _advantages(self, batch: TensorDict, scored: TensorDict, metrics: dict) -> None:
        alg, mask = self.config.algorithm, batch["response_mask"]
        rewards = scores_to_token_rewards(scored["scores"], mask)
        if "ref_log_probs" in batch:
            kl = kl_penalty(batch["old_log_probs"], batch["ref_log_probs"], alg.kl_penalty)
            metrics["kl/to_ref"] = float(masked_mean(kl, mask))
            if alg.use_kl_in_reward:
                metrics["kl/coef"] = self.kl_ctrl.value
                rewards, _ = apply_kl_penalty(
                    rewards,
                    batch["old_log_probs"],
                    batch["ref_log_probs"],
                    mask,
                    self.kl_ctrl,
                    alg.kl_penalty,
                )
        inputs = {name: batch[name] for name in INPUTS if name in batch}
        if "reward_components" in scored:  # GDPO's
            weights = alg.gdpo_reward_weights or [1.0] * len(alg.gdpo_reward_keys)
            inputs["reward_components"] = scored["reward_components"]
            inputs["reward_component_weights"] = torch.tensor(weights)
        batch["advantages"], batch["returns"] = compute_advantages(
            alg.adv_type,
            rewards,
            mask,
            normalize=alg.normalize_advantages,
            values=batch.get("values"),
            index=batch["index"],
            gamma=alg.gamma,
            lam=alg.gae_lambda,
            norm_adv_by_std=alg.norm_adv_by_std,
            inputs=inputs,
        )

    def _whole_shards(self, rows: list[int]) -> list[int]:
        """``rows`` padded with its first ones to whole shards of every rollout and reward rank;
        the caller drops the results of the extras."""
        ranks = math.lcm(
            self.components.world_size("rollout"), self.components.world_size("reward")
        )
        return rows + rows[: (-len(rows)) % ranks]

    def _greedy_baselines(self, batch: TensorDict) -> torch.Tensor:
        """ReMax's baseline, ``[B]``: the reward of the greedy response to each row's prompt,
        generated once per group (greedy decoding draws nothing from the sampler's RNG)."""
        size = self.config.algorithm.group_size
        prompt_width = batch["input_ids"].shape[1] - batch["responses"].shape[1]
        firsts = batch[::size]
        prompts = TensorDict(
            {
                "input_ids": firsts["input_ids"][:, :prompt_width],
                "attention_mask": firsts["attention_mask"][:, :prompt_width],
                "index": firsts["index"],
            },
            batch_size=firsts.batch_size,
        )
        prompts["answers"] = firsts["answers"]
        groups = prompts.batch_size[0]
        padded = prompts[self._whole_shards(list(range(groups)))]
        greedy = padded.update(self.rollout.generate(padded, self.version, greedy=True))
        scores = self.reward.score(greedy)["scores"][:groups]
        return scores.repeat_interleave(size)

    def _batch_metrics(self, batch: TensorDict, scored: TensorDict) -> dict[str, float]:
        mask = batch["response_mask"].bool()
        lengths = mask.sum(-1).float()
        metrics = {
            "reward/mean": float(scored["scores"].mean()),
            **_accuracy("reward/accuracy", scored),
            "reward/unparsed": float(scored["unparsed"].float().mean()),
            "reward/timeouts": int(scored["timed_out"].sum()),
            "response/length_mean": float(lengths.mean()),
            "response/clip_ratio": float(
                (lengths == self.config.data.max_response_length).float().mean()
            ),
            # the share of the passes' token positions that are padding (left of the prompts,
            # right of the responses up to the batch's longest)
            "perf/padding_share": 1.0 - float(batch["attention_mask"].float().mean()),
        }
        if "overlong_penalty" in scored:
            penalty = scored["overlong_penalty"]
            metrics["reward/overlong_penalty_mean"] = float(penalty.mean())
            metrics["reward/overlong"] = float((penalty < 0).float().mean())
        if "reward_components" in scored:
            means = scored["reward_components"].mean(0).tolist()
            for key, mean in zip(self.config.algorithm.gdpo_reward_keys, means, strict=True):
                metrics[f"reward/component/{key}_mean"] = mean
        if "values" in batch:
            values = batch["values"]
            metrics["critic/value_mean"] = float(masked_mean(values, mask))
            metrics["critic/vf_explained_var"] = float(
                explained_variance(values, batch["returns"], mask)
            )
        return metrics

    # validation and checkpoints ----------------------------------------------------------------

    def evaluate(self, iteration: int) -> dict[str, float]:
        """Greedy accuracy on the validation prompts; with ``runner.val_n`` = n, also n samples
        per prompt (``validation.py``); generations of the first prompts to the run folder."""
        self._sync()
        run, pad = self.config.runner, self.tokenizer.pad_token_id
        rows = list(range(len(self.val_set)))
        padded = self._whole_shards(rows)
        prompts = prompt_batch(padded, self.val_set, 1, pad)
        batch = prompts.update(self.rollout.generate(prompts, self.version, greedy=True))
        greedy = batch.update(self.reward.score(batch))[: len(rows)]
        metrics = {
            "val/reward_mean": float(greedy["scores"].mean()),
            **_accuracy("val/accuracy", greedy),
        }
        n, samples = run.val_n, None
        if n:
            many = prompt_batch(padded, self.val_set, n, pad)
            many.update(self.rollout.sample_validation(many, self.version, run.seed + iteration))
            samples = many.update(self.reward.score(many))[: len(rows) * n]
            metrics.update(sample_metrics(samples, n))
        shown = rows[: run.log_val_generations]
        if shown:
            where = self.run_dir / "validation" / f"iter_{iteration:06d}.jsonl"
            texts = [self.val_set.prompts[i] for i in shown]
            answers = [self.val_set.answers[i] for i in shown]
            write_generations(where, self.tokenizer, texts, answers, greedy, samples, n)
        return metrics

    def checkpoint(self):
        state = {
            "sampler": self.sampler.state_dict(),
            "kl_ctrl": self.kl_ctrl.state_dict(),
            "version": self.version,
            "generated_tokens": self.generated_tokens,
        }
        return save_checkpoint(
            self.run_dir, self.config, self.progress, self._saved(), self._world_sizes(), state
        )

    def summary(self, wall_s: float, means: dict[str, float]) -> dict[str, Any]:
        p = self.progress
        # accuracy when the scorer gives verdicts; a bare-number custom reward has only means
        name = "accuracy" if "val/accuracy" in p.first_eval else "reward_mean"
        before, after = p.first_eval[f"val/{name}"], p.last_eval[f"val/{name}"]
        say(
            f"validation {name.replace('_', ' ')}: {before:.3f} before PPO, {after:.3f} after "
            f"({len(self.val_set)} prompts, greedy)"
        )
        return {
            f"val_{name}_before": round(before, 4),
            f"val_{name}_after": round(after, 4),
            "val_prompts": len(self.val_set),
            "iterations": p.iteration,
            "wall_s": round(wall_s, 3),
            # all: prompt and response tokens over the iteration; generated: over generation.
            "tokens_per_s": {
                name: round(means[f"perf/{metric}"], 1)
                for name, metric in (
                    ("all", "tokens_per_s"),
                    ("generated", "generated_tokens_per_s"),
                )
                if f"perf/{metric}" in means
            },
            "generated_tokens": self.generated_tokens,
            "padding_share": round(means.get("perf/padding_share", 0.0), 4),
            # of the actor update's passes: micro-batches cut to their longest, or packed
            "update_padding_share": round(means.get("perf/update_padding_share", 0.0), 4),
            "train_prompts": len(self.train_set),
            "dropped_prompts": self.train_set.dropped + self.val_set.dropped,
            "model": str(self.dirs.actor),
            "placement": self.plan.layout,
        }

    # the run -----------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """Validate, train ``runner.total_iterations`` iterations, validate; the run's summary.
        (``supervisor.run`` is the same with restarts after a lost worker.)"""
        try:
            return train(self)
        finally:
            self.close()

    def close(self) -> None:
        self.components.close()


def _accuracy(name: str, scored: TensorDict) -> dict[str, float]:
    """``{name: share of correct responses}`` over those the scorer gave a verdict on; empty
    when it gave none (a custom reward that returns bare numbers)."""
    judged = scored["judged"]
    if not judged.any():
        return {}
    return {name: float(scored["correct"][judged].float().mean())}


def varied_groups(scored: TensorDict, metric: str, size: int) -> torch.Tensor:
    """``[B]`` bool: rows of groups (``size`` consecutive rows) whose ``metric`` differs within
    the group: ``acc`` the verdicts, ``score`` the scores (DAPO's dynamic sampling keeps them)."""
    if metric == "acc":
        if not bool(scored["judged"].all()):
            raise ConfigError(
                "algorithm.filter_groups.metric: acc needs the scorer's verdicts, and the custom "
                "reward returns bare numbers; use metric=score, or return {'score', 'correct'}"
            )
        values = scored["correct"].float()
    else:
        values = scored["scores"].float()
    grouped = values.reshape(-1, size)
    varied = (grouped != grouped[:, :1]).any(-1)
    return varied.repeat_interleave(size)
