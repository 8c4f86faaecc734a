"""The PPO loss as both modes assemble it, in one place.

    loss = policy_loss                               (clipped surrogate, dual-clip; registry)
           - entropy_coef * entropy                  (entropy bonus)
           + kl_coef * kl(log_prob || ref_log_prob)  (KL loss, when ``ref_log_prob`` is given)
           + value_coef * value_loss                 (a value head: ``loss_type: actor_critic``)

Every term is aggregated with the same ``loss_agg_mode`` and the same global ``num_tokens`` /
``num_seqs``, so each is this micro-batch's share of the mini-batch's term. A separate critic
(reasoning) calls ``value_loss`` on its own.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rlcore.algorithms.aggregation import agg_loss
from rlcore.algorithms.kl import kl_penalty
from rlcore.algorithms.value_loss import value_loss

# Metrics that are shares of the mini-batch loss (they add up over micro-batches and ranks).
LOSS_SHARES = frozenset({"pg_loss", "entropy", "kl_loss", "vf_loss"})


def ppo_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    entropy: torch.Tensor,
    policy_loss_fn: Callable,
    clip_ratio_low: float,
    clip_ratio_high: float,
    clip_ratio_c: float | None,
    loss_agg_mode: str,
    num_tokens: int | None = None,
    num_seqs: int | None = None,
    entropy_coef: float = 0.0,
    ref_log_prob: torch.Tensor | None = None,
    kl_loss_type: str = "low_var_kl",
    kl_coef: float = 0.0,
    values: torch.Tensor | None = None,
    returns: torch.Tensor | None = None,
    old_values: torch.Tensor | None = None,
    value_coef: float = 0.0,
    value_clip: float | None = None,
    huber_delta: float | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The assembled loss (see the module docstring) and its terms as detached 0-d tensors:
    ``pg_loss``, ``pg_clipfrac``, ``ppo_kl``, ``entropy``; ``kl_loss`` with a reference;
    ``vf_loss``, ``vf_clipfrac`` with ``values``. All tensors are ``[B, T]``;
    ``rollout_is_weights`` (rollout correction, ``rollout_correction.py``) weight the policy
    loss's tokens."""
    agg = {"loss_agg_mode": loss_agg_mode, "num_tokens": num_tokens, "num_seqs": num_seqs}
    pg_loss, pg = policy_loss_fn(
        old_log_prob,
        log_prob,
        advantages,
        response_mask,
        clip_ratio_low=clip_ratio_low,
        clip_ratio_high=clip_ratio_high,
        clip_ratio_c=clip_ratio_c,
        rollout_is_weights=rollout_is_weights,
        **agg,
    )
    entropy_term = agg_loss(
        entropy, response_mask, loss_agg_mode, num_tokens=num_tokens, num_seqs=num_seqs
    )
    loss = pg_loss - entropy_coef * entropy_term
    metrics = {
        "pg_loss": pg_loss.detach(),
        "pg_clipfrac": pg["pg_clipfrac"],
        "ppo_kl": pg["ppo_kl"],
        "entropy": entropy_term.detach(),
    }
    if ref_log_prob is not None:
        kl = kl_penalty(log_prob, ref_log_prob, kl_loss_type)
        kl_term = agg_loss(
            kl, response_mask, loss_agg_mode, num_tokens=num_tokens, num_seqs=num_seqs
        )
        loss = loss + kl_coef * kl_term
        metrics["kl_loss"] = kl_term.detach()
    if values is not None:
        vf_loss, vf = value_loss(
            values,
            returns,
            old_values,
            response_mask,
            value_clip=value_clip,
            huber_delta=huber_delta,
            **agg,
        )
        loss = loss + value_coef * vf_loss
        metrics["vf_loss"] = vf_loss.detach()
        metrics["vf_clipfrac"] = vf["vf_clipfrac"]
    return loss, metrics
