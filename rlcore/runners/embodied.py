"""``EmbodiedRunner``: PPO for policies acting in simulators, in one process.

One iteration, as in the PPO paper's algorithm box:

1. collect ``rollout_steps`` x ``num_envs`` transitions with the current policy;
2. bootstrap truncated episodes (``r + gamma V(s_final)``), then GAE over valid steps;
3. ``ppo_epochs`` passes over shuffled mini-batches of ``ppo_mini_batch_size`` transitions:
   policy loss + ``value_coef`` x value loss - ``entropy_bonus`` x entropy, one backward pass
   through the shared backbone (``loss_type: actor_critic``);
4. every ``eval_every`` iterations, a deterministic evaluation.

Every loss and advantage comes from ``rlcore.algorithms``. Vector envs autoreset on the next
step: the step after an episode ends only resets its env, so it is masked out (``valid`` 0), and
the policy's value of the observation it starts from, the episode's final observation, is
V(s_final).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from envs import check_finite, make_vector_env, space_spec
from rlcore.algorithms import (
    agg_loss,
    compute_gae,
    count_seqs,
    count_tokens,
    get_policy_loss_fn,
    masked_whiten,
    value_loss,
)
from rlcore.config.schema import EmbodiedConfig
from rlcore.models import ActorCritic
from rlcore.runners.metrics import MetricsLogger


@dataclass
class Rollout:
    """One iteration's experience, ``[N, T]`` (env, step) unless noted."""

    obs: torch.Tensor  # [N, T, *obs_shape]
    actions: torch.Tensor  # [N, T, ...]
    log_probs: torch.Tensor
    values: torch.Tensor  # [N, T + 1]: the last column is V(observation after the last step)
    rewards: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    valid: torch.Tensor  # 0 on the reset step that follows an episode's end


class EmbodiedRunner:
    def __init__(self, config: EmbodiedConfig) -> None:
        self.config = config
        run = config.runner
        torch.set_num_threads(run.torch_threads)
        torch.manual_seed(run.seed)
        self.env_id = config.env.id
        self.envs = make_vector_env(self.env_id, config.env.num_envs, config.env.vector_mode)
        self.eval_envs = make_vector_env(self.env_id, run.eval_episodes, config.env.vector_mode)
        self.spec = space_spec(self.envs, self.env_id)
        m = config.actor.model
        self.model = ActorCritic(
            self.spec, m.hidden_sizes, m.activation, m.shared_backbone, m.ortho_init, m.log_std_init
        )
        self.optimizer = torch.optim.Adam(
            self.model.parameters(), lr=config.actor.optim.lr, eps=config.actor.optim.adam_eps
        )
        self.policy_loss = get_policy_loss_fn(config.algorithm.policy_loss)
        self.batch = run.rollout_steps * config.env.num_envs
        self.iterations = max(1, run.total_env_steps // self.batch)
        name = (
            run.run_name
            or f"{self.env_id.replace(':', '.')}-s{run.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
        )
        self.run_dir = Path(run.output_dir) / name
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.json").write_text(json.dumps(dataclasses.asdict(config), indent=2))
        obs, _ = self.envs.reset(seed=run.seed)
        self.obs = torch.as_tensor(obs, dtype=torch.float32)
        self.prev_done = torch.zeros(config.env.num_envs, dtype=torch.bool)
        self.episode_return = np.zeros(config.env.num_envs)
        self.episode_length = np.zeros(config.env.num_envs, dtype=np.int64)
        self.finished: list[tuple[float, int]] = []

    # 1. collect --------------------------------------------------------------------------------

    def collect(self) -> Rollout:
        T, N = self.config.runner.rollout_steps, self.config.env.num_envs
        obs = torch.empty((T, N, *self.spec.obs_shape))
        actions, log_probs, values, rewards = [], [], torch.empty(T + 1, N), torch.empty(T, N)
        terminated, truncated = (
            torch.empty(T, N, dtype=torch.bool),
            torch.empty(T, N, dtype=torch.bool),
        )
        valid = torch.empty(T, N, dtype=torch.bool)
        for t in range(T):
            obs[t] = self.obs
            with torch.no_grad():
                action, log_prob, values[t] = self.model.act(self.obs)
            next_obs, reward, term, trunc, _ = self.envs.step(self.model.env_action(action))
            check_finite(self.env_id, next_obs, reward)
            actions.append(action)
            log_probs.append(log_prob)
            rewards[t] = torch.as_tensor(reward, dtype=torch.float32)
            terminated[t], truncated[t] = torch.as_tensor(term), torch.as_tensor(trunc)
            valid[t] = ~self.prev_done
            self._track_episodes(reward, term | trunc, valid[t].numpy())
            self.prev_done = terminated[t] | truncated[t]
            self.obs = torch.as_tensor(next_obs, dtype=torch.float32)
        with torch.no_grad():
            values[T] = self.model.value(self.obs)
        nt = lambda x: x.transpose(0, 1)  # noqa: E731  [T, N, ...] -> [N, T, ...]
        return Rollout(
            obs=nt(obs),
            actions=nt(torch.stack(actions)),
            log_probs=nt(torch.stack(log_probs)),
            values=nt(values),
            rewards=nt(rewards),
            terminated=nt(terminated),
            truncated=nt(truncated),
            valid=nt(valid),
        )

    def _track_episodes(self, reward: np.ndarray, done: np.ndarray, valid: np.ndarray) -> None:
        self.episode_return += reward * valid
        self.episode_length += valid
        for i in np.flatnonzero(done & valid):
            self.finished.append((float(self.episode_return[i]), int(self.episode_length[i])))
            self.episode_return[i], self.episode_length[i] = 0.0, 0

    # 2. advantages -----------------------------------------------------------------------------

    def advantages(self, rollout: Rollout) -> tuple[torch.Tensor, torch.Tensor]:
        alg = self.config.algorithm
        # A time limit is not a terminal state: credit the value of where the episode stopped.
        # After an episode ends, the next step starts from its final observation, so that
        # step's value column is V(s_final).
        bootstrap = rollout.truncated & ~rollout.terminated
        rewards = rollout.rewards + alg.gamma * rollout.values[:, 1:] * bootstrap
        return compute_gae(
            rewards,
            rollout.valid,
            values=rollout.values,
            gamma=alg.gamma,
            lam=alg.gae_lambda,
            dones=rollout.terminated | rollout.truncated,
        )

    # 3. update ---------------------------------------------------------------------------------

    def update(self, rollout: Rollout, advantages: torch.Tensor, returns: torch.Tensor) -> dict:
        alg, actor = self.config.algorithm, self.config.actor
        flat = lambda x: x.reshape(self.batch, *x.shape[2:])  # noqa: E731
        obs, actions = flat(rollout.obs), flat(rollout.actions)
        old_log_probs, old_values = flat(rollout.log_probs), flat(rollout.values[:, :-1])
        mask, returns = flat(rollout.valid), flat(returns)
        if alg.normalize_advantages:
            advantages = masked_whiten(advantages, rollout.valid)
        advantages = flat(advantages)
        mini, micro = (
            actor.ppo_mini_batch_size,
            actor.ppo_micro_batch_size or actor.ppo_mini_batch_size,
        )
        stats: dict[str, list[float]] = {}
        for _ in range(actor.ppo_epochs):
            order = torch.randperm(self.batch)
            for start in range(0, self.batch, mini):
                index = order[start : start + mini]
                counts = {"num_tokens": count_tokens(mask[index, None]),
                          "num_seqs": count_seqs(mask[index, None])}  # fmt: skip
                self.optimizer.zero_grad(set_to_none=True)
                for micro_start in range(0, mini, micro):
                    i = index[micro_start : micro_start + micro]
                    metrics = self._loss(obs[i], actions[i], old_log_probs[i], old_values[i],
                                         advantages[i], returns[i], mask[i], counts)  # fmt: skip
                    for name, value in metrics.items():
                        stats.setdefault(name, []).append(float(value))
                norm = self._step()
                stats.setdefault("grad_norm", []).append(norm)
        result = {name: float(np.mean(values)) for name, values in stats.items()}
        predicted = old_values[mask]
        target = returns[mask]
        result["explained_variance"] = float(
            1 - (target - predicted).var() / target.var().clamp_min(1e-8)
        )
        return result

    def _loss(self, obs, actions, old_log_probs, old_values, advantages, returns, mask, counts):
        alg = self.config.algorithm
        col = lambda x: x[:, None]  # noqa: E731  transitions are [B, 1] "sequences" for the losses
        log_probs, entropy, values = self.model.evaluate(obs, actions)
        pg_loss, pg_metrics = self.policy_loss(
            col(old_log_probs), col(log_probs), col(advantages), col(mask),
            clip_ratio_low=alg.clip_ratio_low, clip_ratio_high=alg.clip_ratio_high,
            clip_ratio_c=alg.clip_ratio_c, loss_agg_mode=alg.loss_agg_func, **counts,
        )  # fmt: skip
        v_loss, v_metrics = value_loss(
            col(values), col(returns), col(old_values), col(mask),
            value_clip=alg.value_clip, huber_delta=alg.huber_delta,
            loss_agg_mode=alg.loss_agg_func, **counts,
        )  # fmt: skip
        entropy_loss = agg_loss(col(entropy), col(mask), alg.loss_agg_func, **counts)
        loss = pg_loss + alg.value_coef * v_loss - alg.entropy_bonus * entropy_loss
        loss.backward()
        return {
            "policy_loss": pg_loss.detach(),
            "value_loss": v_loss.detach(),
            "entropy": entropy_loss.detach(),
            "pg_clipfrac": pg_metrics["pg_clipfrac"],
            "approx_kl": pg_metrics["ppo_kl"],
            "vf_clipfrac": v_metrics["vf_clipfrac"],
        }

    def _step(self) -> float:
        max_norm = self.config.actor.optim.max_grad_norm
        params = [p for p in self.model.parameters() if p.grad is not None]
        norm = torch.nn.utils.clip_grad_norm_(
            params, max_norm if max_norm is not None else float("inf")
        )
        self.optimizer.step()
        return float(norm)

    # 4. evaluate -------------------------------------------------------------------------------

    def evaluate(self, seed: int) -> np.ndarray:
        """Returns of one deterministic episode in each eval env."""
        n = self.config.runner.eval_episodes
        obs, _ = self.eval_envs.reset(seed=seed)
        returns, done = np.zeros(n), np.zeros(n, dtype=bool)
        for _ in range(1_000_000):
            with torch.no_grad():
                action, _, _ = self.model.act(torch.as_tensor(obs, dtype=torch.float32), True)
            obs, reward, term, trunc, _ = self.eval_envs.step(self.model.env_action(action))
            returns += reward * ~done
            done |= term | trunc
            if done.all():
                return returns
        raise RuntimeError(f"env.id: '{self.env_id}' ran a million eval steps without ending")

    # the loop ----------------------------------------------------------------------------------

    def run(self) -> dict:
        cfg, run = self.config, self.config.runner
        logger = MetricsLogger(self.run_dir, tensorboard=cfg.logger.tensorboard,
                               wandb=cfg.logger.wandb, config=dataclasses.asdict(cfg))  # fmt: skip
        bar = tqdm(total=self.iterations * self.batch, disable=not run.progress, file=sys.stderr,
                   unit="step", dynamic_ncols=True)  # fmt: skip
        start = time.perf_counter()
        threshold = cfg.env.solved_threshold
        reached: tuple[float, int] | None = None
        eval_returns = np.zeros(0)
        env_steps = 0
        try:
            for iteration in range(1, self.iterations + 1):
                if cfg.actor.optim.lr_schedule == "linear":
                    frac = 1.0 - (iteration - 1) / self.iterations
                    for group in self.optimizer.param_groups:
                        group["lr"] = frac * cfg.actor.optim.lr
                timer = time.perf_counter()
                rollout = self.collect()
                t_collect = time.perf_counter() - timer
                advantages, returns = self.advantages(rollout)
                t_gae = time.perf_counter() - timer - t_collect
                metrics = self.update(rollout, advantages, returns)
                t_update = time.perf_counter() - timer - t_collect - t_gae
                env_steps += self.batch
                metrics.update({"time/collect_s": t_collect, "time/gae_s": t_gae,
                                "time/update_s": t_update,
                                "sps": self.batch / (time.perf_counter() - timer)})  # fmt: skip
                if self.finished:
                    metrics["episode_return"] = float(np.mean([r for r, _ in self.finished]))
                    metrics["episode_length"] = float(np.mean([n for _, n in self.finished]))
                    self.finished.clear()
                last = iteration == self.iterations
                if (run.eval_every and iteration % run.eval_every == 0) or last:
                    timer = time.perf_counter()
                    eval_returns = self.evaluate(seed=run.seed + 10_000 + iteration)
                    metrics["eval_return"] = float(eval_returns.mean())
                    metrics["time/eval_s"] = time.perf_counter() - timer
                    if (
                        threshold is not None
                        and reached is None
                        and eval_returns.mean() >= threshold
                    ):
                        reached = (time.perf_counter() - start, env_steps)
                logger.log(env_steps, metrics)
                bar.update(self.batch)
                bar.set_postfix(ret=metrics.get("episode_return"), eval=metrics.get("eval_return"),
                                refresh=False)  # fmt: skip
        finally:
            bar.close()
            logger.close()
            self.envs.close()
            self.eval_envs.close()
        wall = time.perf_counter() - start
        summary = {
            "env_id": self.env_id,
            "eval_return_mean": float(eval_returns.mean()),
            "eval_return_std": float(eval_returns.std()),
            "env_steps": env_steps,
            "iterations": self.iterations,
            "wall_s": round(wall, 3),
            "sps": round(env_steps / wall, 1),
            "solved_threshold": threshold,
            "time_to_threshold_s": None if reached is None else round(reached[0], 3),
            "steps_to_threshold": None if reached is None else reached[1],
            "run_dir": str(self.run_dir),
        }
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        return summary
