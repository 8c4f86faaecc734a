"""``ReasoningRunner``: PPO on a causal language model with rule rewards, driven by a single
controller over the ``rollout``, ``reward``, ``actor``, ``critic`` and ``ref`` components (each
where ``cluster.component_placement`` puts it; the default: all in the driver's process, the
rollout generating with the actor's own module). The models come prepared, as folders
(``rlcore.prepare``).

One iteration, as in verl's PPO:

1. sync: the rollout gets the actor's latest weights (nothing to copy when it shares the module);
2. take ``data.train_batch_size`` prompts; the rollout generates ``group_size`` responses each
   (with DAPO's dynamic sampling, until that many groups differ: ``dynamic_sampling.py``);
3. the reward worker scores them (1 for a right answer, ``format_score`` for a wrong one);
4. the actor recomputes the responses' log-probs (``old_log_probs``; with the sum of squared
   token probabilities for the optimal token baselines), the reference gives its own (for the
   KL), the critic its values; for ReMax the rollout answers each prompt greedily once and the
   reward scores that (the baseline, ``baselines.py``);
5. the score goes on each response's last token; with ``use_kl_in_reward`` every token pays
   ``kl_coef * KL(actor || ref)``; the estimator (``adv_type``) turns these into per-token
   advantages and returns, whitened when ``normalize_advantages`` (``rlcore.algorithms``);
6. the critic takes its clipped value-loss steps, then (after ``critic_warmup`` iterations) the
   actor its PPO steps, with the KL loss when ``use_kl_loss``.

That is the iteration at ``runner.max_staleness`` 0 (``pipeline.Lockstep``); at k >= 1 the same
iteration takes batches the rollout generated ahead with older weights, and submits the passes
and updates without waiting (``pipeline.Pipeline``).

Validation decodes greedily and reports the share of right answers, before the first iteration,
every ``val_every`` iterations and after the last.
"""

from __future__ import annotations

import math
from typing import Any

from tensordict import TensorDict

from rlcore.algorithms import build_kl_controller
from rlcore.columns import REWARD_BASELINES
from rlcore.config.schema import ReasoningConfig
from rlcore.data.identity import data_state, resumed_data
from rlcore.data.sampler import PromptSampler, TrainingPrompts, data_name, load_prompt_set
from rlcore.data.sequences import trim_padding
from rlcore.models.lm import load_tokenizer
from rlcore.placement import PlacementPlan
from rlcore.prepare import ModelDirs
from rlcore.rewards.worker import RewardWorker
from rlcore.runners import reasoning_metrics
from rlcore.runners.advantages import reasoning_advantages
from rlcore.runners.baselines import greedy_baselines
from rlcore.runners.checkpoint import data_files
from rlcore.runners.driver import Driver
from rlcore.runners.passes import Passes
from rlcore.runners.pipeline import Lockstep, Pipeline, ReasoningBatches
from rlcore.runners.progress import Stopwatch
from rlcore.runners.score_normalizer import ScoreNormalizer
from rlcore.runners.validation import validate
from rlcore.scheduler.deployment import ComponentSpec
from rlcore.scheduler.handles import Peer
from rlcore.tools.protocol import load_tools, schema
from rlcore.workers.reasoning.lm_actor import LMActor, LMCritic, LMReference
from rlcore.workers.reasoning.rollout import RolloutWorker


class ReasoningRunner(Driver):
    """See the module docstring (``plan``: ``plan_for_config``, ``models``: ``prepare_models``)."""

    def __init__(self, config: ReasoningConfig, plan: PlacementPlan, models: ModelDirs) -> None:
        run, alg = config.runner, config.algorithm
        self.models = models
        self.tokenizer = load_tokenizer(models.actor)
        # rollout.tools: their schemas, for a chat template that lists them to the model
        tools = [schema(t) for t in load_tools(config.rollout.tools).values()] or None
        self.train_set = load_prompt_set(config, self.tokenizer, True, tools)
        self.val_set = load_prompt_set(config, self.tokenizer, False, tools)
        self.sampler = PromptSampler(len(self.train_set), run.seed, config.data.shuffle)
        self.prompts = TrainingPrompts(
            self.sampler,
            self.train_set,
            config.data.train_batch_size,
            alg.group_size,
            self.tokenizer.pad_token_id,
        )
        ctrl = alg.kl_ctrl
        self.kl_ctrl = build_kl_controller(ctrl.type, ctrl.kl_coef, ctrl.target_kl, ctrl.horizon)
        self.generated_tokens = 0  # response tokens generated for training, dropped included
        self.changed_data: list[str] = []  # resumed on other data (runner.resume_changed_data)
        self.regenerated = 0  # batches in flight at the checkpoint resumed from, generated again
        # reward.model.score_normalize: the model's scores standardised by running statistics
        self.normalize = ScoreNormalizer.of(config.reward)
        self.normalized: dict[str, float] = {}  # its statistics after the latest batch
        super().__init__(config, plan, data_name(config.data))
        self.schedule = self.schedule_of(
            iterations=run.total_iterations,
            samples_per_iteration=config.data.train_batch_size * alg.group_size,
            eval_every=run.val_every,
            eval_first=True,
            eval_metric="val/accuracy",
            threshold=None,
            stop_at_threshold=False,
            log_by_samples=False,
            postfix={"reward/accuracy": "acc", "val/accuracy": "val"},
        )

    def launch(self) -> None:
        config, models, plan = self.config, self.models, self.plan
        # the actor's module when fused; whether the actor trains on the rollout's GPUs (an
        # sglang engine then gives its memory back while it does)
        collocated = bool(plan.device_set("actor") & plan.device_set("rollout"))
        rollout_peers = {"actor": Peer("actor", local_only=True), "collocated": collocated}
        specs = [
            ComponentSpec("actor", LMActor, (config, models.actor)),
            ComponentSpec("rollout", RolloutWorker, (config, models.actor), rollout_peers),
            ComponentSpec("reward", RewardWorker, (config, models.actor)),
        ]
        if "critic" in plan.components:
            specs.append(ComponentSpec("critic", LMCritic, (config, models.critic)))
        if "ref" in plan.components:
            specs.append(ComponentSpec("ref", LMReference, (config, models.actor)))
        handles = self.components.launch_all(specs)
        built = {spec.name: handle for spec, handle in zip(specs, handles, strict=True)}
        self.actor: LMActor = built["actor"]
        self.rollout: RolloutWorker = built["rollout"]
        self.reward: RewardWorker = built["reward"]
        self.critic: LMCritic | None = built.get("critic")
        self.ref: LMReference | None = built.get("ref")
        self.passes = Passes(config, self.actor, self.rollout, self.ref, self.critic)
        # the batches: made when asked (synchronous), or ahead while the actor trains (pipeline.py)
        batches = Pipeline if config.runner.max_staleness else Lockstep
        parts = (self.prompts, self.rollout, self.passes, self.components)
        self.pipeline: ReasoningBatches = batches(config, *parts)

    def saved(self) -> dict[str, Any]:
        saved = {"actor": self.actor, "rollout": self.rollout}
        return saved if self.critic is None else {**saved, "critic": self.critic}

    def state(self) -> dict[str, Any]:
        return {  # asynchronous: the sampler before the batches in flight, which a resumed run
            "sampler": self.pipeline.sampler_state(),  # generates again
            "in_flight": len(self.pipeline.queue),
            "kl_ctrl": self.kl_ctrl.state_dict(),
            **({} if self.normalize is None else {"score_norm": self.normalize.state_dict()}),
            "version": self.version,
            "generated_tokens": self.generated_tokens,
            **data_state(data_files(self.config), len(self.train_set)),  # what it trained on
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.changed_data = resumed_data(state, data_files(self.config), len(self.train_set))
        self.sampler.load_state_dict(state["sampler"])
        self.kl_ctrl.load_state_dict(state["kl_ctrl"])
        if self.normalize is not None and "score_norm" in state:
            self.normalize.load_state_dict(state["score_norm"])
        self.version = state["version"]
        self.generated_tokens = state.get("generated_tokens", 0)
        self.regenerated = state.get("in_flight", 0)

    def sync(self) -> None:
        if self.rollout.resume_memory():  # an engine that gave its memory back while training
            self.components.forget_weights("rollout")
        super().sync()

    # one iteration -----------------------------------------------------------------------------

    def iterate(self, iteration: int) -> dict[str, float]:
        """One iteration, both modes: the batch and the way its stages run are the pipeline's
        (``Lockstep`` at ``runner.max_staleness`` 0, else ``Pipeline``)."""
        cfg, watch, batches = self.config, Stopwatch(), self.pipeline
        if batches.needs_sync():
            with watch("sync"):
                self.sync()
        batch, scored, metrics = batches.next_batch(iteration, self.version, watch, self.score)
        batch = trim_padding(batch)  # no pass pays for columns that are padding in every row
        if "reward_baselines" in self.passes.inputs:  # ReMax
            with watch("generate_baseline"):
                batch[REWARD_BASELINES] = greedy_baselines(
                    batch,
                    cfg.algorithm.group_size,
                    self.whole_shards,
                    self._greedy,
                    self.reward.score,
                )
            metrics["reward/greedy_baseline_mean"] = float(batch[REWARD_BASELINES].mean())
        batches.run_passes(batch, watch, self.version)  # old log-probs, the reference's, values
        with watch("advantages"):
            metrics.update(reasoning_advantages(cfg.algorithm, self.kl_ctrl, batch, scored))
        trains = iteration > cfg.critic.critic_warmup
        updates = [] if self.critic is None else [("critic_update", self.critic)]
        if trains:
            updates.append(("actor_update", self.actor))
        metrics.update(batches.update(updates, batch, watch))
        if trains:
            # the run's summary averages perf/ metrics: this one under that name too
            metrics["perf/update_padding_share"] = metrics["actor/padding_share"]
            self.version += 1
            batches.updated(self.version)
        metrics.update(batches.finish(batch, self.version - int(trains)))
        metrics.update(reasoning_metrics.batch_metrics(cfg, batch, scored))
        metrics.update(self.normalized)
        metrics.update(watch.metrics())
        self.generated_tokens += reasoning_metrics.throughput(metrics, watch.seconds, batch)
        return metrics

    def score(self, batch: TensorDict) -> TensorDict:
        """A training batch's rewards (normalised with ``reward.model.score_normalize``)."""
        scored = self.reward.score(batch)
        if self.normalize is not None:
            self.normalized = self.normalize(scored)
        return scored

    def whole_shards(self, rows: list[int]) -> list[int]:
        """``rows`` padded with its first ones to whole shards of every rollout and reward rank;
        the caller drops the results of the extras."""
        world = self.components.world_size
        return rows + rows[: (-len(rows)) % math.lcm(world("rollout"), world("reward"))]

    def _greedy(self, prompts: TensorDict) -> TensorDict:
        return self.rollout.generate(prompts, self.version, greedy=True)

    def _sample(self, prompts: TensorDict, seed: int) -> TensorDict:
        return self.rollout.sample_validation(prompts, self.version, seed)

    # validation and the summary ----------------------------------------------------------------

    def evaluate(self, iteration: int) -> dict[str, float]:
        """Greedy accuracy on the validation prompts, and samples (``validation.validate``)."""
        self.sync()
        return validate(
            self.config,
            self.val_set,
            self.tokenizer,
            self.run_dir,
            iteration,
            whole_shards=self.whole_shards,
            greedy=self._greedy,
            sample=self._sample,
            score=self.reward.score,
        )

    def summary(self, wall_s: float, means: dict[str, float]) -> dict[str, Any]:
        return reasoning_metrics.summary(self, wall_s, means)
