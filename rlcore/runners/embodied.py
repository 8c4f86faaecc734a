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
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from ray import cloudpickle
from safetensors.torch import load_model, save_model

from rlcore.algorithms import compute_gae
from rlcore.config.schema import EmbodiedConfig
from rlcore.envs import check_finite, make_vector_env, space_spec
from rlcore.models import ActorCritic
from rlcore.runners.checkpoint import (
    check_envs_can_be_saved,
    check_same_run,
    find_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from rlcore.runners.loop import new_progress, num_iterations, run_name, train
from rlcore.runners.normalization import ObsNormalizer, RewardScaler
from rlcore.workers.embodied_actor import EmbodiedActor
from rlcore.workers.env_worker import RemoteVectorEnv


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
    """PPO in this process, or one data-parallel rank of it when ``ctx`` comes from a scheduler.

    A rank steps ``env.num_envs / world_size`` envs seeded apart from the other ranks', updates
    through ``EmbodiedActor``'s DDP, and (rank 0) evaluates; the driver runs the loop.
    """

    def __init__(self, config: EmbodiedConfig, ctx: Any = None, env_handle: Any = None) -> None:
        self.config = config
        run = config.runner
        # Ranks come from data_parallel.run_data_parallel, which checked that they share the envs.
        rank, world = (ctx.rank, ctx.world_size) if ctx is not None else (0, 1)
        self.rank = rank
        torch.set_num_threads(run.torch_threads)
        torch.manual_seed(run.seed)  # the same initial weights on every rank
        self.env_id = config.env.id
        self.num_envs = config.env.num_envs // world
        self.envs = (
            make_vector_env(self.env_id, self.num_envs, config.env.vector_mode)
            if env_handle is None
            else RemoteVectorEnv(env_handle)  # the env component runs in its own process
        )
        self.eval_envs = (
            make_vector_env(self.env_id, run.eval_episodes, config.env.vector_mode)
            if rank == 0
            else None
        )
        self.spec = space_spec(self.envs, self.env_id)
        m = config.actor.model
        self.model = ActorCritic(
            self.spec, m.hidden_sizes, m.activation, m.shared_backbone, m.ortho_init, m.log_std_init
        )
        self.actor = EmbodiedActor(ctx, config, self.model)
        if rank:  # same initial weights, but each rank samples its own actions
            torch.manual_seed(run.seed + 7919 * rank)
        self.shuffle = torch.Generator().manual_seed(run.seed)  # mini-batch order
        self.batch = run.rollout_steps * self.num_envs  # this rank's
        self.iterations = num_iterations(config)  # for the learning-rate schedule
        obs, _ = self.envs.reset(seed=run.seed + 1000 * rank)
        self.obs = torch.as_tensor(obs, dtype=torch.float32)
        self.prev_done = torch.zeros(self.num_envs, dtype=torch.bool)
        self.episode_return = np.zeros(self.num_envs)
        self.episode_length = np.zeros(self.num_envs, dtype=np.int64)
        self.finished: list[tuple[float, int]] = []
        env = config.env
        self.obs_norm = (
            ObsNormalizer(self.spec.obs_shape, env.clip_obs) if env.normalize_obs else None
        )
        self.reward_scaler = (
            RewardScaler(self.num_envs, config.algorithm.gamma, env.clip_reward)
            if env.normalize_reward
            else None
        )
        self.progress = new_progress()
        if run.checkpoint_every:
            try:
                if isinstance(self.envs, RemoteVectorEnv):
                    self.envs.check_saveable(self.env_id)
                else:
                    check_envs_can_be_saved(self.envs, self.env_id)
            except Exception:
                self.close()
                raise
        if ctx is not None:  # a rank: the driver owns the run folder and the loop
            return
        if run.resume_dir is not None:
            self._resume(find_checkpoint(run.resume_dir))
        else:
            self.run_dir = Path(run.output_dir) / run_name(config)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.json").write_text(json.dumps(dataclasses.asdict(config), indent=2))

    # checkpoints -------------------------------------------------------------------------------

    def _carry(self) -> dict:
        return {
            "obs": self.obs, "prev_done": self.prev_done, "finished": self.finished,
            "episode_return": self.episode_return, "episode_length": self.episode_length,
            "obs_norm": self.obs_norm, "reward_scaler": self.reward_scaler,
        }  # fmt: skip

    def save(self) -> Path:
        state = {
            "config": dataclasses.asdict(self.config),
            "optimizer": self.actor.optimizer.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "shuffle_rng": self.shuffle.get_state(),
            "progress": self.progress,
            "carry": self._carry(),
        }
        where = self.run_dir / "checkpoints" / f"iter_{self.progress['iteration']:06d}"
        return save_checkpoint(where, self.model, state, self.envs)

    # A data-parallel rank's share of a checkpoint (data_parallel.py writes the rest): rank 0
    # the weights (DDP keeps them equal on every rank); every rank its optimiser, RNGs, carry-over
    # and envs, which differ between ranks.

    def save_rank(self, directory: str) -> None:
        where = Path(directory)
        if self.rank == 0:
            save_model(self.model, str(where / "model.safetensors"))
        state = {"optimizer": self.actor.optimizer.state_dict(), "torch_rng": torch.get_rng_state(),
                 "shuffle_rng": self.shuffle.get_state(), "carry": self._carry()}  # fmt: skip
        torch.save(state, where / f"rank{self.rank}.pt")
        envs = where / f"envs_rank{self.rank}.pkl"
        if isinstance(self.envs, RemoteVectorEnv):
            self.envs.save(str(envs))
        else:
            envs.write_bytes(cloudpickle.dumps(self.envs))

    def load_rank(self, directory: str) -> None:
        where = Path(directory)
        load_model(self.model, str(where / "model.safetensors"))
        state = torch.load(where / f"rank{self.rank}.pt", weights_only=False)
        self.actor.optimizer.load_state_dict(state["optimizer"])
        self.shuffle.set_state(state["shuffle_rng"])
        for name, value in state["carry"].items():
            setattr(self, name, value)
        envs = where / f"envs_rank{self.rank}.pkl"
        if isinstance(self.envs, RemoteVectorEnv):
            self.envs.load(str(envs))
        else:
            self.envs.close()
            self.envs = cloudpickle.loads(envs.read_bytes())
        torch.set_rng_state(state["torch_rng"])

    def _resume(self, checkpoint: Path) -> None:
        state, envs = load_checkpoint(checkpoint, self.model)
        check_same_run(state["config"], dataclasses.asdict(self.config), checkpoint)
        self.envs.close()
        self.envs = envs
        self.actor.optimizer.load_state_dict(state["optimizer"])
        self.shuffle.set_state(state["shuffle_rng"])
        self.progress = state["progress"]
        for name, value in state["carry"].items():
            setattr(self, name, value)
        torch.set_rng_state(state["torch_rng"])
        self.run_dir = checkpoint.parent.parent

    # 1. collect --------------------------------------------------------------------------------

    def policy_obs(self, obs: torch.Tensor, update: bool = False) -> torch.Tensor:
        """What the policy sees: the observation, normalised when ``env.normalize_obs``."""
        return obs if self.obs_norm is None else self.obs_norm(obs, update)

    def collect(self) -> Rollout:
        T, N = self.config.runner.rollout_steps, self.num_envs
        obs = torch.empty((T, N, *self.spec.obs_shape))
        actions, log_probs, values, rewards = [], [], torch.empty(T + 1, N), torch.empty(T, N)
        terminated, truncated = (
            torch.empty(T, N, dtype=torch.bool),
            torch.empty(T, N, dtype=torch.bool),
        )
        valid = torch.empty(T, N, dtype=torch.bool)
        for t in range(T):
            obs[t] = self.policy_obs(self.obs, update=True)
            with torch.no_grad():
                action, log_prob, values[t] = self.model.act(obs[t])
            next_obs, reward, term, trunc, _ = self.envs.step(self.model.env_action(action))
            check_finite(self.env_id, next_obs, reward)
            actions.append(action)
            log_probs.append(log_prob)
            terminated[t], truncated[t] = torch.as_tensor(term), torch.as_tensor(trunc)
            done = terminated[t] | truncated[t]
            valid[t] = ~self.prev_done
            rewards[t] = torch.as_tensor(reward, dtype=torch.float32)
            if self.reward_scaler is not None:
                rewards[t] = self.reward_scaler(rewards[t], done, valid[t])
            self._track_episodes(reward, done.numpy(), valid[t].numpy())
            self.prev_done = done
            self.obs = torch.as_tensor(next_obs, dtype=torch.float32)
        with torch.no_grad():
            values[T] = self.model.value(self.policy_obs(self.obs))
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
        flat = lambda x: x.reshape(self.batch, *x.shape[2:])  # noqa: E731
        batch = {
            "obs": flat(rollout.obs), "actions": flat(rollout.actions),
            "log_probs": flat(rollout.log_probs), "values": flat(rollout.values[:, :-1]),
            "advantages": flat(advantages), "returns": flat(returns), "valid": flat(rollout.valid),
        }  # fmt: skip
        return self.actor.update(batch, self.shuffle)

    # 4. evaluate -------------------------------------------------------------------------------

    def evaluate(self, seed: int) -> np.ndarray:
        """Returns of one deterministic episode in each eval env."""
        n = self.config.runner.eval_episodes
        obs, _ = self.eval_envs.reset(seed=seed)
        returns, done = np.zeros(n), np.zeros(n, dtype=bool)
        for _ in range(1_000_000):
            with torch.no_grad():
                seen = self.policy_obs(torch.as_tensor(obs, dtype=torch.float32))
                action, _, _ = self.model.act(seen, deterministic=True)
            obs, reward, term, trunc, _ = self.eval_envs.step(self.model.env_action(action))
            returns += reward * ~done
            done |= term | trunc
            if done.all():
                return returns
        raise RuntimeError(f"env.id: '{self.env_id}' ran a million eval steps without ending")

    # the loop ----------------------------------------------------------------------------------

    def iterate(self, iteration: int) -> dict:
        """One PPO iteration (steps 1-3) on this rank's envs; its metrics."""
        optim = self.config.actor.optim
        if optim.lr_schedule == "linear":
            self.actor.set_lr(optim.lr * (1.0 - (iteration - 1) / self.iterations))
        timer = time.perf_counter()
        rollout = self.collect()
        t_collect = time.perf_counter() - timer
        advantages, returns = self.advantages(rollout)
        t_gae = time.perf_counter() - timer - t_collect
        metrics = self.update(rollout, advantages, returns)
        t_update = time.perf_counter() - timer - t_collect - t_gae
        metrics.update(
            {"time/collect_s": t_collect, "time/gae_s": t_gae, "time/update_s": t_update}
        )
        if self.finished:
            metrics["episode_return"] = float(np.mean([r for r, _ in self.finished]))
            metrics["episode_length"] = float(np.mean([n for _, n in self.finished]))
            self.finished.clear()
        return metrics

    def run(self) -> dict:
        """Train in this process to ``runner.total_env_steps``; the run's summary."""
        try:
            return train(self.config, iterate=self.iterate, evaluate=self.evaluate,
                         save=self.save, run_dir=self.run_dir, progress=self.progress)  # fmt: skip
        finally:
            self.close()

    def close(self) -> None:
        self.envs.close()
        if self.eval_envs is not None:
            self.eval_envs.close()


def make_rank(ctx: Any, config: EmbodiedConfig, env_handles: list | None = None) -> EmbodiedRunner:
    """The component each data-parallel rank hosts (``Scheduler.launch`` passes ``ctx``).

    ``env_handles``: the processes of the ``env`` component when it is placed apart, one per
    rank; rank r steps the envs of env rank r.
    """
    handle = None if env_handles is None else env_handles[ctx.rank]
    return EmbodiedRunner(config, ctx, handle)
