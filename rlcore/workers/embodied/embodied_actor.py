"""``EmbodiedActor``: the ``actor`` component of embodied runs, the PPO update of the actor-critic.

It owns the model and, through ``Trainer``, the optimiser, the learning-rate schedule and the
data-parallel strategy; what is its own is the loss: with ``loss_type: actor_critic`` the policy
and the value head (shared backbone or twin trunks) train in one backward pass,
``policy loss + value_coef x value loss - entropy_bonus x entropy``
(``rlcore.algorithms.ppo_loss``).
Transitions are one-step "sequences" (``[B, 1]``) for the losses, masked by ``loss_mask``
(the valid steps).
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from rlcore.algorithms import LOSS_SHARES, ppo_loss
from rlcore.algorithms.loss import OPTIONAL_READS
from rlcore.columns import ACTIONS, LAST_OBS, LAST_VALUE, LOSS_MASK, OBS, OLD_LOG_PROBS, VALUES
from rlcore.config.schema import EmbodiedConfig
from rlcore.envs import SpaceSpec
from rlcore.scheduler.dispatch import Dispatch, dispatch
from rlcore.workers.embodied.embodied_rollout import make_policy
from rlcore.workers.training.strategy import FsdpOptions
from rlcore.workers.training.trainer import TrainedComponent, Trainer, UpdateSizes

# What the model reads of a batch; the loss reads its columns (``PPOLossSettings.reads``).
MODEL_READS = (OBS, ACTIONS)


class EmbodiedActor(TrainedComponent):
    """See the module docstring."""

    def __init__(self, ctx: Any, config: EmbodiedConfig, spec: SpaceSpec) -> None:
        self.config = config
        self.model = make_policy(config, spec)
        actor = config.actor
        self.trainer = Trainer(
            ctx,
            self.model,
            optim=actor.optim,
            updates=config.derived.iterations,
            sizes=UpdateSizes(
                actor.ppo_epochs,
                actor.ppo_mini_batch_size,
                actor.ppo_micro_batch_size,
                actor.shuffle,
            ),
            seed=config.runner.seed,
            additive=LOSS_SHARES,
            backend=actor.training_backend,
            fsdp=FsdpOptions.of(actor.fsdp),
            max_skipped_steps=config.runner.max_skipped_steps,
        )
        self.loss_settings = config.algorithm.ppo_loss_settings()

    @dispatch(Dispatch.SHARD)
    @torch.no_grad()
    def recompute(self, batch: TensorDict) -> TensorDict:
        """The rollout's ``old_log_probs``, ``values`` (``[N, T]``) and ``last_value`` (``[N]``) of
        this rank's rows, recomputed with the actor's weights, ``actor.log_prob_micro_batch_size``
        transitions per forward pass."""
        rows, steps = batch[ACTIONS].shape[:2]
        obs, actions = batch[OBS].flatten(0, 1), batch[ACTIONS].flatten(0, 1)
        size = self.config.actor.log_prob_micro_batch_size or rows * steps
        on = self.trainer.device
        pairs = zip(obs.split(size), actions.split(size), strict=True)
        parts = [self.model(o.to(on), a.to(on)) for o, a in pairs]
        log_probs = torch.cat([p[0] for p in parts]).view(rows, steps).cpu()
        values = torch.cat([p[2] for p in parts]).view(rows, steps).cpu()
        last = torch.cat([self.model.value(o.to(on)) for o in batch[LAST_OBS].split(size)]).cpu()
        return TensorDict(
            {OLD_LOG_PROBS: log_probs, VALUES: values, LAST_VALUE: last}, batch_size=[rows]
        )

    @dispatch(Dispatch.SHARD_REDUCED)
    def update(self, batch: TensorDict) -> dict[str, float]:
        """PPO epochs over this rank's rows of ``batch`` (``[N]`` rows of ``[N, T]`` steps, with
        ``advantages`` and ``returns``); the metrics of all ranks."""
        steps = batch.batch_size[0] * batch[LOSS_MASK].shape[1]
        read = MODEL_READS + self.loss_settings.reads(value_head=True)
        read += tuple(k for k in OPTIONAL_READS if k in batch)
        flat = TensorDict({k: batch[k].flatten(0, 1) for k in read}, batch_size=[steps])
        metrics = self.trainer.fit(flat, self._loss, mask_key=LOSS_MASK)
        return {_name(k): v for k, v in metrics.items()}

    def _loss(self, module: torch.nn.Module, micro: TensorDict, counts: dict[str, int]):
        log_probs, entropy, values = module(micro[OBS], micro[ACTIONS])
        # transitions are [B, 1] "sequences" for the losses
        steps = {k: v[:, None] for k, v in micro.items() if k not in MODEL_READS}
        return ppo_loss(
            self.loss_settings, steps, log_probs[:, None], entropy[:, None], values[:, None], counts
        )


def _name(metric: str) -> str:
    """verl's metric names: the value head's terms under critic/, the rest under actor/."""
    return f"critic/{metric}" if metric.startswith("vf_") else f"actor/{metric}"
