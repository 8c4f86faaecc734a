"""``EmbodiedRollout``: the ``rollout`` component of embodied runs. It owns policy inference
(action, log-prob, value) and the sampling RNG, and drives its env rank through an iteration's steps
(``collect``) or an evaluation. Rollout rank r steps env rank r: directly when they share a
process, through Ray otherwise.

Placed with the actor it acts with the actor's own module (nothing to copy); placed apart it holds
a copy that the driver's weight sync overwrites each iteration. Either way every call names the
weight version the driver expects, and a rollout holding another refuses to act.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from rlcore.columns import (
    ACTIONS,
    LAST_OBS,
    LAST_VALUE,
    LOSS_MASK,
    OBS,
    OLD_LOG_PROBS,
    REWARDS,
    TERMINATED,
    TRUNCATED,
    VALUES,
)
from rlcore.config.schema import EmbodiedConfig
from rlcore.envs import SpaceSpec
from rlcore.models import ActorCritic
from rlcore.models.lm_policy import LMPolicy
from rlcore.models.user_policy import UserPolicy, load_policy_class
from rlcore.scheduler.dispatch import Dispatch, dispatch
from rlcore.scheduler.handles import submit
from rlcore.scheduler.worker import rank_seed
from rlcore.workers.embodied.env_worker import Transition
from rlcore.workers.files.state_files import load_state, save_state
from rlcore.workers.weight_version import check_weight_version

STEP_FIELDS = (ACTIONS, OLD_LOG_PROBS, VALUES, REWARDS, TERMINATED, TRUNCATED, LOSS_MASK)


def make_policy(config: EmbodiedConfig, spec: SpaceSpec) -> ActorCritic | UserPolicy | LMPolicy:
    """The actor-critic of ``actor.model`` (the user's class with ``actor.model.cls``, the LM
    policy with ``actor.model.type: lm``), initialised from ``runner.seed`` (the same weights
    in every process that builds it)."""
    m = config.actor.model
    torch.manual_seed(config.runner.seed)
    if m.type == "lm":
        return LMPolicy(spec, m.lm)
    if m.cls is not None:
        return UserPolicy(load_policy_class(m.cls), spec, m.cls)
    return ActorCritic(
        spec, m.hidden_sizes, m.activation, m.shared_backbone, m.ortho_init, m.log_std_init
    )


class EmbodiedRollout:
    """See the module docstring. ``env``: its env rank (object or handle); ``actor``: the actor's
    worker when fused with it (its module is used), else None."""

    def __init__(
        self, ctx: Any, config: EmbodiedConfig, spec: SpaceSpec, env: Any, actor: Any = None
    ) -> None:
        run = config.runner
        self.rank = ctx.rank
        self.env = env
        self.steps = run.rollout_steps
        self.eval_max_steps = run.eval_max_steps
        shared = actor is not None and not actor.trainer.shards  # a sharded module cannot act
        # The component's device (a GPU when the plan gives it one). Steps stay on the env's
        # device (the CPU, or a GPU simulator's): observations go to the policy and its outputs
        # come back there, so a policy on the simulator's GPU acts with no copy at all.
        self.device = actor.trainer.device if shared else ctx.torch_device
        self.model = actor.model if shared else make_policy(config, spec).to(self.device)
        self.micro = config.rollout.micro_batch_size  # observations per forward; None = all
        self.stages = config.rollout.pipeline_stage_num
        # Each rank samples its own actions; the stream is saved in checkpoints.
        seed = rank_seed(run.seed, ctx.rank, "sampling")
        self.generator = torch.Generator(self.device).manual_seed(seed)
        self.version = -1  # no weights synced yet

    # weights -----------------------------------------------------------------------------------

    def weights(self) -> dict[str, torch.Tensor]:
        return dict(self.model.state_dict())

    @dispatch(Dispatch.ALL)
    def set_weight_version(self, version: int) -> None:
        self.version = version

    # experience --------------------------------------------------------------------------------

    @dispatch(Dispatch.GATHER)
    @torch.no_grad()
    def collect(self, version: int) -> TensorDict:
        """``runner.rollout_steps`` steps of this rank's envs with the current policy.

        Returns ``[N]`` rows (one per env) of ``[N, T]`` entries: ``obs``, ``actions``,
        ``old_log_probs``, ``values``, ``rewards``, ``terminated``, ``truncated``,
        ``loss_mask`` (the valid steps); and
        ``[N]`` ones: ``last_obs`` and ``last_value`` (the observation after the last step and its
        V) and the sums of
        the episodes that ended (``episode_return_sum``, ``episode_length_sum``,
        ``episode_count``).
        """
        check_weight_version(self.rank, self.version, version)
        current = self.env.observe()
        if self.stages > 1:
            obs, acted, stepped, current = self._steps_in_stages(current)
        else:
            obs, acted, stepped, current = self._steps(current)
        rows: dict[str, list[torch.Tensor]] = {k: [] for k in STEP_FIELDS}
        for (action, log_prob, value), step in zip(acted, stepped, strict=True):
            for name, item in (
                (ACTIONS, action),
                (OLD_LOG_PROBS, log_prob),
                (VALUES, value),
                (REWARDS, step.rewards),
                (TERMINATED, step.terminated),
                (TRUNCATED, step.truncated),
                (LOSS_MASK, step.valid),
            ):
                rows[name].append(item)
        batch = {name: torch.stack(items, dim=1) for name, items in rows.items()}  # [N, T, ...]
        batch[OBS] = obs.transpose(0, 1)
        batch[LAST_OBS] = current
        batch[LAST_VALUE] = self.model.value(current.to(self.device))
        batch.update(self.env.finished_episodes())
        # The batch leaves on the CPU: one copy per rollout from a GPU simulator, none otherwise.
        return TensorDict({k: v.cpu() for k, v in batch.items()}, batch_size=[current.shape[0]])

    def _steps(self, current: torch.Tensor) -> tuple:
        """``runner.rollout_steps`` steps of all the envs at once: the observations ``[T, N,
        ...]``, each step's (actions, log-probs, values) and ``Transition``, the last
        observations."""
        T = self.steps
        obs = torch.empty((T, *current.shape), device=current.device)
        acted, stepped = [], []
        for t in range(T):
            obs[t] = current
            acted.append(self._act(current))
            stepped.append(self.env.step(acted[-1][0], last=t == T - 1))
            current = stepped[-1].next_obs
        return obs, acted, stepped, current

    def _steps_in_stages(self, current: torch.Tensor) -> tuple:
        """``_steps`` with the envs in ``rollout.pipeline_stage_num`` stages (RLinf's
        pipelining): a stage's step is submitted to the env process without waiting, and the
        policy acts on the next stage (whose step came back meanwhile) while the env steps it.
        The env process runs its calls in order: step t of stage 0, 1, ..., then step t + 1."""
        T, S = self.steps, self.stages
        obs = torch.empty((T, *current.shape), device=current.device)
        currents = list(current.chunk(S))
        width = currents[0].shape[0]
        pending: list[Any] = [None] * S
        acted: list[list[tuple]] = [[] for _ in range(T)]
        stepped: list[list[Transition]] = [[] for _ in range(T)]
        for t in range(T + 1):
            for s in range(S):
                if t > 0:  # the stage's step t - 1, which the env took while we acted
                    stepped[t - 1].append(pending[s].result())
                    currents[s] = stepped[t - 1][s].next_obs
                if t == T:
                    continue
                obs[t, s * width : (s + 1) * width] = currents[s]
                acted[t].append(self._act(currents[s]))
                pending[s] = submit(self.env, "step", acted[t][s][0], last=t == T - 1, stage=s)
        joined = [tuple(torch.cat(column) for column in zip(*a, strict=True)) for a in acted]
        names = [f.name for f in fields(Transition)]
        transitions = [
            Transition(**{n: torch.cat([getattr(step, n) for step in steps]) for n in names})
            for steps in stepped
        ]
        return obs, joined, transitions, torch.cat(currents)

    def _act(self, obs: torch.Tensor, deterministic: bool = False):
        """``model.act`` over ``rollout.micro_batch_size`` observations at a time, on the
        policy's device; the results on the observations' device (the env's)."""
        chunks = (
            [obs] if self.micro is None or obs.shape[0] <= self.micro else obs.split(self.micro)
        )
        parts = [
            self.model.act(chunk.to(self.device), deterministic, generator=self.generator)
            for chunk in chunks
        ]
        return tuple(torch.cat(items).to(obs.device) for items in zip(*parts, strict=True))

    @dispatch(Dispatch.RANK0)
    @torch.no_grad()
    def evaluate(self, seed: int, version: int) -> tuple[np.ndarray, int, float | None]:
        """Returns of one deterministic episode in each eval env (env rank 0's), how many had
        not ended after ``runner.eval_max_steps`` steps (their returns so far count), and the
        share that ended in success (None when the env reports no success)."""
        check_weight_version(self.rank, self.version, version)
        obs = self.env.eval_reset(seed)
        for _ in range(self.eval_max_steps):
            action, _, _ = self._act(obs, deterministic=True)
            obs, returns = self.env.eval_step(action)
            if returns is not None:
                return returns, 0, self.env.eval_success_rate()
        return (*self.env.eval_cut(), self.env.eval_success_rate())

    # checkpoints: each rank's sampling stream --------------------------------------------------

    @dispatch(Dispatch.ALL)
    def save_checkpoint(self, directory: str) -> None:
        where = Path(directory)
        where.mkdir(parents=True, exist_ok=True)
        save_state({"generator": self.generator.get_state()}, where / f"rank{self.rank}.pt")

    @dispatch(Dispatch.ALL)
    def load_checkpoint(self, directory: str) -> None:
        state = load_state(Path(directory) / f"rank{self.rank}.pt")
        self.generator.set_state(state["generator"])
