"""Policy losses: ``(old_log_prob, log_prob, advantages, response_mask, ...) -> (loss, metrics)``.

All tensors are ``[B, T]``; log-probs are those of the sampled tokens (actions). ``metrics`` holds
detached scalar tensors (no host sync per micro-batch; the runner turns them into numbers).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rlcore.algorithms.aggregation import agg_loss
from rlcore.algorithms.registry import Registry
from rlcore.algorithms.stats import masked_mean

PolicyLossFn = Callable[..., tuple[torch.Tensor, dict[str, torch.Tensor]]]
POLICY_LOSSES: Registry[PolicyLossFn] = Registry(
    "policy loss",
    (
        "old_log_prob",
        "log_prob",
        "advantages",
        "response_mask",
        "clip_ratio_low",
        "clip_ratio_high",
        "clip_ratio_c",
        "loss_agg_mode",
        "num_tokens",
        "num_seqs",
    ),
)
LOG_RATIO_LIMIT = 20.0


def register_policy_loss(name: str) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Register a policy loss under ``name`` (the value of ``algorithm.policy_loss``)."""
    return POLICY_LOSSES.register(name)


def get_policy_loss_fn(name: str) -> PolicyLossFn:
    """The policy loss registered as ``name``; ``KeyError`` naming the close matches otherwise."""
    return POLICY_LOSSES.get(name)


@register_policy_loss("ppo")
def policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float | None = None,
    loss_agg_mode: str = "token-mean",
    num_tokens: int | None = None,
    num_seqs: int | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped surrogate (Schulman et al. 2017) with asymmetric bounds and optional dual-clip.

    ``r = exp(clamp(log_prob - old_log_prob, -20, 20))``; per token
    ``max(-A * r, -A * clamp(r, 1 - clip_ratio_low, 1 + clip_ratio_high))``. With
    ``clip_ratio_c`` set (dual-clip, Ye et al. 2020), tokens with ``A < 0`` are further capped
    at ``-A * clip_ratio_c``, so a huge ratio on a bad action cannot dominate the batch.

    Metrics:
        ``pg_clipfrac``: share of valid tokens where the clipped term was taken.
        ``pg_clipfrac_lower``: share where the dual-clip cap was taken (0 without dual-clip).
        ``ppo_kl``: masked mean of ``old_log_prob - log_prob``.
    """
    valid = response_mask.bool()
    log_ratio = torch.clamp(log_prob - old_log_prob, -LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    losses = torch.maximum(unclipped, clipped)
    took_clipped = clipped > unclipped
    if clip_ratio_c is not None:
        cap = -advantages * clip_ratio_c
        took_lower = (advantages < 0) & (losses > cap)
        losses = torch.where(took_lower, cap, losses)
    loss = agg_loss(losses, valid, loss_agg_mode, num_tokens=num_tokens, num_seqs=num_seqs)
    with torch.no_grad():  # metrics: no autograd graph to build
        metrics = {
            "pg_clipfrac": masked_mean(took_clipped.to(losses.dtype), valid),
            "pg_clipfrac_lower": (
                masked_mean(took_lower.to(losses.dtype), valid)
                if clip_ratio_c is not None
                else torch.zeros((), dtype=losses.dtype, device=losses.device)
            ),
            "ppo_kl": masked_mean(-log_ratio, valid),
        }
    return loss, metrics


def _zero(like: torch.Tensor) -> torch.Tensor:
    return torch.zeros((), dtype=like.dtype, device=like.device)


@register_policy_loss("gspo")
def gspo_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float | None = None,
    loss_agg_mode: str = "token-mean",
    num_tokens: int | None = None,
    num_seqs: int | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GSPO (Zheng et al. 2025, arXiv 2507.18071): PPO's clipped surrogate on a sequence-level
    ratio, as verl's ``loss_mode=gspo``.

    ``s_i = exp(mean over valid t of (log_prob - old_log_prob))``, the geometric mean of the
    token ratios; token ``t`` uses ``s_i * exp(log_prob_t - sg(log_prob_t))``, which equals
    ``s_i`` in value and passes each token's own gradient (``d s / d log_prob_t = s_i``). The
    log-ratio is capped at 10 before ``exp``; then per token
    ``max(-A * s, -A * clamp(s, 1 - clip_ratio_low, 1 + clip_ratio_high))``. There is no
    dual-clip (``clip_ratio_c`` is ignored). The paper's clip range is about 3e-4 / 4e-4, far
    narrower than PPO's, and verl pairs it with ``loss_agg_mode=seq-mean-token-mean``.

    Metrics: ``pg_clipfrac`` (tokens where the clipped term was taken), ``ppo_kl`` (masked mean of
    ``old_log_prob - log_prob``), ``pg_clipfrac_lower`` (0: no dual-clip).
    """
    valid = response_mask.bool()
    weights = response_mask.to(log_prob.dtype)
    token_log_ratio = log_prob - old_log_prob
    lengths = weights.sum(-1).clamp(min=1.0)
    seq_log_ratio = (token_log_ratio * weights).sum(-1) / lengths  # [B]
    log_ratio = log_prob - log_prob.detach() + seq_log_ratio.detach()[:, None]
    ratio = torch.exp(torch.clamp(log_ratio, max=10.0))
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    losses = torch.maximum(unclipped, clipped)
    loss = agg_loss(losses, valid, loss_agg_mode, num_tokens=num_tokens, num_seqs=num_seqs)
    with torch.no_grad():
        metrics = {
            "pg_clipfrac": masked_mean((clipped > unclipped).to(losses.dtype), valid),
            "pg_clipfrac_lower": _zero(losses),
            "ppo_kl": masked_mean(-token_log_ratio, valid),
        }
    return loss, metrics


@register_policy_loss("gpg")
def gpg_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float | None = None,
    loss_agg_mode: str = "token-mean",
    num_tokens: int | None = None,
    num_seqs: int | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GPG (Chu et al. 2025, arXiv 2504.02546), as verl's ``loss_mode=gpg``: the plain policy
    gradient ``-A * log_prob`` per token, with no ratio and no clipping (one update per batch of
    experience is what it is made for: ``ppo_epochs=1`` and one mini-batch). The clip options are
    accepted and unused.

    Metrics: ``ppo_kl`` (masked mean of ``old_log_prob - log_prob``); ``pg_clipfrac`` and
    ``pg_clipfrac_lower`` are 0 (nothing is clipped).
    """
    valid = response_mask.bool()
    losses = -advantages * log_prob
    loss = agg_loss(losses, valid, loss_agg_mode, num_tokens=num_tokens, num_seqs=num_seqs)
    with torch.no_grad():
        metrics = {
            "pg_clipfrac": _zero(losses),
            "pg_clipfrac_lower": _zero(losses),
            "ppo_kl": masked_mean(old_log_prob - log_prob, valid),
        }
    return loss, metrics
