"""The PPO loss as both modes assemble it, in one place.

    loss = policy_loss                                    (clipped surrogate, dual-clip; registry)
           - entropy_bonus * entropy                      (entropy bonus)
           + kl_loss_coef * kl(log_prob || ref_log_prob)  (KL loss, with ``use_kl_loss``)
           + value_coef * value_loss                      (a value head: ``values`` given)

Every term is aggregated with the same ``loss_agg_func`` and the same global ``num_tokens`` /
``num_seqs``, so each is this micro-batch's share of the mini-batch's term. A separate critic
(reasoning) calls ``value_loss`` on its own.

Settings at construction, tensors at call: the settings are bound once in a frozen
``PPOLossSettings`` (built from ``algorithm``: ``AlgorithmConfig.ppo_loss_settings``), under the
config's key names; the call takes the model's outputs and the batch, whose columns it reads by
the names of ``rlcore.columns``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from rlcore.algorithms.aggregation import agg_loss
from rlcore.algorithms.kl import kl_penalty
from rlcore.algorithms.value_loss import value_loss
from rlcore.columns import (
    ADVANTAGES,
    LOSS_MASK,
    OLD_LOG_PROBS,
    REF_LOG_PROBS,
    RETURNS,
    ROLLOUT_IS_WEIGHTS,
    VALUES,
)

# Metrics that are shares of the mini-batch loss (they add up over micro-batches and ranks).
LOSS_SHARES = frozenset({"pg_loss", "entropy", "kl_loss", "vf_loss"})

# The columns ``ppo_loss`` reads: always, with ``use_kl_loss``, with a value head, when present.
PPO_READS = (OLD_LOG_PROBS, ADVANTAGES, LOSS_MASK)
KL_READS = (REF_LOG_PROBS,)
VALUE_READS = (VALUES, RETURNS)
OPTIONAL_READS = (ROLLOUT_IS_WEIGHTS,)


@dataclass(frozen=True, kw_only=True)
class PPOLossSettings:
    """What ``ppo_loss`` computes with, bound once; each field is the ``algorithm`` key of the
    same name (``policy_loss``: the registered loss with its ``policy_loss_options`` bound;
    ``use_kl_loss``: the KL term is on, ``use_kl_loss`` with a ``kl_loss_coef`` above 0)."""

    policy_loss: Callable
    clip_ratio_low: float
    clip_ratio_high: float
    clip_ratio_c: float | None
    loss_agg_func: str
    entropy_bonus: float = 0.0
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.0
    kl_loss_type: str = "low_var_kl"
    value_coef: float = 0.0
    value_clip: float | None = None
    huber_delta: float | None = None

    def reads(self, value_head: bool) -> tuple[str, ...]:
        """The columns the loss needs (``OPTIONAL_READS`` besides, when the batch has them)."""
        kl = KL_READS if self.use_kl_loss else ()
        return PPO_READS + kl + (VALUE_READS if value_head else ())


def ppo_loss(
    settings: PPOLossSettings,
    batch: Mapping[str, torch.Tensor],
    log_prob: torch.Tensor,
    entropy: torch.Tensor,
    values: torch.Tensor | None = None,
    counts: Mapping[str, int | float | None] | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The assembled loss (see the module docstring) and its terms as detached 0-d tensors:
    ``pg_loss``, ``pg_clipfrac``, ``ppo_kl``, ``entropy``; ``kl_loss`` with ``use_kl_loss``;
    ``vf_loss``, ``vf_clipfrac`` with ``values``.

    ``batch``: the columns of ``settings.reads`` (``[B, T]`` each), and ``ROLLOUT_IS_WEIGHTS``
    (rollout correction, ``rollout_correction.py``) to weight the policy loss's tokens;
    ``log_prob``, ``entropy``, ``values``: the model's ``[B, T]`` outputs on it (``values`` of
    a value head trained with the policy); ``counts``: the mini-batch's global ``num_tokens``
    and ``num_seqs`` (None: this batch's own)."""
    s, mask = settings, batch[LOSS_MASK]
    counts = dict(counts or {})
    # the registry's losses take verl's keyword (users' registered losses are called with it)
    agg = {"loss_agg_mode": s.loss_agg_func, **counts}
    weights = batch.get(ROLLOUT_IS_WEIGHTS)
    pg_loss, pg = s.policy_loss(
        batch[OLD_LOG_PROBS],
        log_prob,
        batch[ADVANTAGES],
        mask,
        clip_ratio_low=s.clip_ratio_low,
        clip_ratio_high=s.clip_ratio_high,
        clip_ratio_c=s.clip_ratio_c,
        rollout_is_weights=weights,
        **agg,
    )
    entropy_term = agg_loss(entropy, mask, s.loss_agg_func, **counts)
    loss = pg_loss - s.entropy_bonus * entropy_term
    metrics = {
        "pg_loss": pg_loss.detach(),
        "pg_clipfrac": pg["pg_clipfrac"],
        "ppo_kl": pg["ppo_kl"],
        "entropy": entropy_term.detach(),
    }
    if s.use_kl_loss:
        kl = kl_penalty(log_prob, batch[REF_LOG_PROBS], s.kl_loss_type)
        kl_term = agg_loss(kl, mask, s.loss_agg_func, **counts)
        loss = loss + s.kl_loss_coef * kl_term
        metrics["kl_loss"] = kl_term.detach()
    if values is not None:
        vf_loss, vf = value_loss(
            values,
            batch[RETURNS],
            batch[VALUES],
            mask,
            value_clip=s.value_clip,
            huber_delta=s.huber_delta,
            **agg,
        )
        loss = loss + s.value_coef * vf_loss
        metrics["vf_loss"] = vf_loss.detach()
        metrics["vf_clipfrac"] = vf["vf_clipfrac"]
    return loss, metrics
