"""``EmbodiedRunner``: PPO for policies acting in simulators, driven by a single controller.

The driver holds the loop; the work is done by three components, each a worker owning one
thing, wherever ``cluster.component_placement`` puts them: ``env`` (the vector envs, eval envs,
normalisation, episode statistics), ``rollout`` (policy inference, stepping its env rank) and
``actor`` (the PPO update). Components placed on the same slots share a process and call each
other directly; the default layout puts all three in the driver's own process. One iteration,
as in the PPO paper's algorithm box:

1. sync: the rollout gets the actor's latest weights (nothing to copy when they share a module);
2. collect: ``runner.rollout_steps`` x ``env.num_envs`` transitions (env <-> rollout); with
   ``actor.log_prob_micro_batch_size`` set, the actor then recomputes their log-probs and values
   with its own weights (for a rollout that acts at another precision or on another device);
3. advantages: truncated episodes bootstrap from ``V(s_final)``; the estimator
   ``algorithm.adv_type`` (GAE) runs over valid steps, then whitening (``rlcore.algorithms``);
4. update: ``ppo_epochs`` over mini-batches of the policy + value + entropy loss;
5. evaluate (every ``eval_every`` iterations) and checkpoint (every ``checkpoint_every``).
"""

from __future__ import annotations

from typing import Any

from tensordict import TensorDict

from rlcore.columns import ACTIONS, LAST_OBS, LOSS_MASK, OBS, OLD_LOG_PROBS, ROLLOUT_IS_WEIGHTS
from rlcore.config.schema import EmbodiedConfig
from rlcore.envs.registry import solved_threshold
from rlcore.log import say, warn
from rlcore.placement import PlacementPlan
from rlcore.runners import embodied_metrics
from rlcore.runners.advantages import corrected, embodied_advantages
from rlcore.runners.driver import Driver
from rlcore.runners.pipeline import Ahead, InFlight
from rlcore.runners.progress import Stopwatch
from rlcore.scheduler.deployment import ComponentSpec
from rlcore.scheduler.handles import Peer, submit
from rlcore.workers.embodied.embodied_actor import EmbodiedActor
from rlcore.workers.embodied.embodied_rollout import EmbodiedRollout
from rlcore.workers.embodied.env_worker import EnvWorker


class EmbodiedRunner(Driver):
    """See the module docstring. ``plan`` comes from ``plan_for_config(config)``."""

    def __init__(self, config: EmbodiedConfig, plan: PlacementPlan) -> None:
        # (a file's env, path/to/walk.py:Walk, is named walk.Walk)
        super().__init__(
            config, plan, config.env.id.rpartition("/")[2].replace(".py:", ".").replace(":", ".")
        )
        # (with groups every collection starts its episodes afresh: nothing to carry over)
        fresh = config.env.checkpoint_state == "reseed" and config.algorithm.group_size == 1
        if self.resumed_from is not None and fresh:
            say(
                "the envs start fresh episodes (env.checkpoint_state=reseed): this run is not "
                "bit-exact with one never stopped"
            )
        self.version = self.progress.iteration  # of the actor's weights: one per update
        run = config.runner
        self.threshold = solved_threshold(config.env.id, config.env.solved_threshold)
        self.schedule = self.schedule_of(
            iterations=config.derived.iterations,
            samples_per_iteration=run.rollout_steps * config.env.num_envs,
            eval_every=run.eval_every,
            eval_first=False,
            eval_metric="eval/return_mean",
            threshold=self.threshold,
            stop_at_threshold=run.stop_at_threshold,
            log_by_samples=True,
            postfix={"env/episode_return": "ret", "eval/return_mean": "eval"},
        )
        self.episode_ended = False  # by a training env, since this process started
        self.said_no_episodes = False

    def launch(self) -> None:
        config = self.config
        self.env: EnvWorker = self.components.launch(ComponentSpec("env", EnvWorker, (config,)))
        spec = self.env.space_spec()  # the policies' shapes: the env first, then the rest
        self.actor: EmbodiedActor
        self.rollout: EmbodiedRollout
        fused = {"env": Peer("env"), "actor": Peer("actor", local_only=True)}
        self.actor, self.rollout = self.components.launch_all(
            [
                ComponentSpec("actor", EmbodiedActor, (config, spec)),
                ComponentSpec("rollout", EmbodiedRollout, (config, spec), fused),
            ]
        )

        # asynchronous (runner.max_staleness): the rollout collects ahead while the actor trains
        stale = config.runner.max_staleness
        self.ahead = Ahead(stale) if stale else None
        self.regenerated = 0  # batches in flight at the checkpoint resumed from

    def saved(self) -> dict[str, Any]:
        return {"actor": self.actor, "rollout": self.rollout, "env": self.env}

    def state(self) -> dict[str, Any]:
        # asynchronous: the batches in flight, which the envs had stepped through; a resumed run
        # collects new ones from there
        return {} if self.ahead is None else {"in_flight": len(self.ahead.queue)}

    def load_state(self, state: dict[str, Any]) -> None:
        self.regenerated = state.get("in_flight", 0)

    # one iteration -----------------------------------------------------------------------------

    def iterate(self, iteration: int) -> dict[str, float]:
        watch = Stopwatch()
        if self.ahead is not None:
            batch, staleness = self._collected_ahead(iteration, watch)
        else:
            with watch("sync"):
                self.sync()
            with watch("collect"):
                batch = self.rollout.collect(self.version)  # env <-> rollout
        correcting = self.config.algorithm.rollout_correction.rollout_is is not None
        corrections: dict[str, float] = {}
        if self.config.actor.log_prob_micro_batch_size is not None or correcting:
            behaviour = batch[OLD_LOG_PROBS]  # the rollout's, as it collected
            with watch("recompute"):  # the actor's own numbers, not the rollout's
                batch.update(self.actor.recompute(batch.select(OBS, ACTIONS, LAST_OBS)))
            if correcting:  # the decoupled objective: weights to the collecting policy
                weights, _, corrections = corrected(
                    self.config.algorithm, batch[OLD_LOG_PROBS], behaviour, batch[LOSS_MASK]
                )
                batch[ROLLOUT_IS_WEIGHTS] = weights
        with watch("advantages"):
            embodied_advantages(self.config.algorithm, batch)
        with watch("update"):
            metrics = self.actor.update(batch)
        metrics.update(corrections)
        self.version += 1
        if self.ahead is not None:  # the new weights go to the rollout after its collection
            self.ahead.syncing.append(self.components.start_sync("actor", "rollout", self.version))
            metrics["async/staleness"] = float(staleness)
        metrics.update(embodied_metrics.batch_metrics(batch))
        self.episode_ended = self.episode_ended or "env/episode_return" in metrics
        metrics.update(watch.metrics())
        return metrics

    def _collected_ahead(self, iteration: int, watch: Stopwatch) -> tuple[TensorDict, int]:
        """Asynchronous: this iteration's batch, collected while the actor trained on the one
        before (at most ``runner.max_staleness`` updates ago), and its staleness; the next
        collection started, to run while the actor trains on this one (``pipeline.Ahead``)."""
        ahead = self.ahead
        left = self.config.derived.iterations - iteration  # batches to train on after this one
        if not ahead.queue:  # the first iteration (of a start or a resume): fill the pipeline
            with watch("sync"):
                self.sync()
            ahead.top_up(left + 1, self._start_collect)
        with watch("collect"):  # (waiting for it)
            _, batch, staleness = ahead.take(self.version)
        ahead.top_up(left, self._start_collect)
        return batch, staleness

    def _start_collect(self) -> InFlight:
        """A collection submitted to the rollout, with the weights it holds by then."""
        return InFlight(None, submit(self.rollout, "collect", self.version), self.version)

    # evaluation and checkpoints ----------------------------------------------------------------

    def evaluate(self, iteration: int) -> dict[str, float]:
        """One deterministic episode in each of ``runner.eval_episodes`` envs."""
        self.sync()
        run = self.config.runner
        if not self.episode_ended and not self.said_no_episodes:
            self.said_no_episodes = True  # (once: an env that never ends would say it each time)
            warn(self.no_episodes_line())
        returns, cut, success = self.rollout.evaluate(run.seed + 10_000 + iteration, self.version)
        if cut:
            warn(
                f"evaluation: {cut} of {len(returns)} episodes had not ended after "
                f"{run.eval_max_steps} steps (runner.eval_max_steps); their returns so far count"
            )
        mean, std = float(returns.mean()), float(returns.std())
        metrics = {"eval/return_mean": mean, "eval/return_std": std, "eval/cut_episodes": cut}
        return metrics if success is None else {**metrics, "eval/success_rate": success}

    def no_episodes_line(self) -> str:
        """What a run whose training envs ended no episode yet says before it evaluates."""
        c = self.config
        steps = self.progress.samples
        return (
            f"env.id: no episode of {c.env.id} has ended in {steps} training steps "
            f"({steps // c.env.num_envs} per env), so there are no episode statistics "
            "(env/episode_return); if its episodes never end, give it a time limit "
            "(env.kwargs.max_episode_steps) or an end; evaluation episodes stop after "
            f"runner.eval_max_steps={c.runner.eval_max_steps} steps"
        )

    def summary(self, wall_s: float, means: dict[str, float]) -> dict[str, Any]:
        return embodied_metrics.summary(self, wall_s, means)
