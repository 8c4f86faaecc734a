"""Policy losses: ``(old_log_prob, log_prob, advantages, response_mask, ...) -> (loss, metrics)``.

All tensors are ``[B, T]``; log-probs are those of the sampled tokens (actions). ``metrics`` holds
detached scalar tensors (no host sync per micro-batch; the runner turns them into numbers).

A loss with options of its own (``clip_cov_ratio``, ``tau_pos``, ...) takes them as further
keyword-only parameters named exactly as the keys of ``algorithm.policy_loss_options``; the
registry records them (``Entry.extra_kwargs``), the caller passes only those
(``get_policy_loss_fn(name, options)``) and config validation refuses an option set for a loss
that does not read it. The verl losses below follow ``verl/trainer/ppo/core_algos.py`` (v0.9.0).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import torch

from rlcore.algorithms.aggregation import agg_loss, count_seqs
from rlcore.algorithms.registry import Registry
from rlcore.algorithms.stats import masked_mean, masked_sum

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
        "rollout_is_weights",
    ),
)
LOG_RATIO_LIMIT = 20.0


def register_policy_loss(
    name: str, *, not_embodied: str | None = None
) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Register a policy loss under ``name`` (the value of ``algorithm.policy_loss``).

    ``not_embodied``: why the loss means nothing on embodied one-step "sequences" (``T = 1``);
    config validation refuses it in embodied mode with that reason.
    """
    traits = {} if not_embodied is None else {"not_embodied": not_embodied}
    return POLICY_LOSSES.register(name, **traits)


def get_policy_loss_fn(name: str, options: Mapping[str, Any] | None = None) -> PolicyLossFn:
    """The policy loss registered as ``name``; ``KeyError`` naming the close matches otherwise.

    With ``options`` (``vars(config.algorithm.policy_loss_options)``), the loss with the options
    it reads bound; the others are not passed (validation has refused them when set).
    """
    entry = POLICY_LOSSES.entry(name)
    if options is None:
        return entry.fn
    return functools.partial(
        entry.fn, **{k: options[k] for k in entry.extra_kwargs if k in options}
    )


@register_policy_loss("vanilla")  # verl's name for it
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
    rollout_is_weights: torch.Tensor | None = None,
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
    losses = weighted(losses, rollout_is_weights)
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


def weighted(losses: torch.Tensor, rollout_is_weights: torch.Tensor | None) -> torch.Tensor:
    """Per-token ``losses`` times the rollout-correction importance weights, when there are any
    (``rollout_correction.py``; the weights carry no gradient)."""
    if rollout_is_weights is None:
        return losses
    return losses * rollout_is_weights.detach().to(losses.dtype)


def _zero(like: torch.Tensor) -> torch.Tensor:
    return torch.zeros((), dtype=like.dtype, device=like.device)


SEQUENCE_RATIO = (
    "its ratio is per sequence (a geometric mean of token ratios), and an embodied transition is "
    "a one-step sequence, whose sequence ratio is its token ratio: the loss reduces to a "
    "token-level clipped surrogate, which ppo is; use ppo"
)


@register_policy_loss("gspo", not_embodied=SEQUENCE_RATIO)
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
    rollout_is_weights: torch.Tensor | None = None,
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
    losses = weighted(losses, rollout_is_weights)
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
    rollout_is_weights: torch.Tensor | None = None,
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
    losses = weighted(losses, rollout_is_weights)
    loss = agg_loss(losses, valid, loss_agg_mode, num_tokens=num_tokens, num_seqs=num_seqs)
    with torch.no_grad():
        metrics = {
            "pg_clipfrac": _zero(losses),
            "pg_clipfrac_lower": _zero(losses),
            "ppo_kl": masked_mean(old_log_prob - log_prob, valid),
        }
    return loss, metrics


def _contract_metrics(
    like: torch.Tensor,
    valid: torch.Tensor,
    log_ratio: torch.Tensor,
    clipped: torch.Tensor | None = None,
    lower: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """``pg_clipfrac`` / ``pg_clipfrac_lower``: shares of valid tokens in ``clipped`` / ``lower``
    (0 when None); ``ppo_kl``: masked mean of ``-log_ratio``."""

    def share(tokens: torch.Tensor | None) -> torch.Tensor:
        return _zero(like) if tokens is None else masked_mean(tokens.to(like.dtype), valid)

    with torch.no_grad():
        return {
            "pg_clipfrac": share(clipped),
            "pg_clipfrac_lower": share(lower),
            "ppo_kl": masked_mean(-log_ratio, valid),
        }


def _clamped_log_ratio(old_log_prob: torch.Tensor, log_prob: torch.Tensor) -> torch.Tensor:
    return torch.clamp(log_prob - old_log_prob, -LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)


@register_policy_loss("clip_cov")
def clip_cov_policy_loss(
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
    rollout_is_weights: torch.Tensor | None = None,
    clip_cov_ratio: float = 0.0002,
    clip_cov_lb: float = 1.0,
    clip_cov_ub: float = 5.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clip-Cov (Cui et al. 2025, "The Entropy Mechanism of RL for Reasoning LMs", arXiv
    2505.22617), verl's ``loss_mode=clip_cov``: PPO's clipped surrogate (no dual-clip, ratio
    ``exp(log_prob - old_log_prob)`` not clamped), with the gradient of a few high-covariance
    tokens cut, against entropy collapse.

    Per valid token ``cov = (A - mean A) * (log_prob - mean log_prob)`` (means over this call's
    valid tokens). Candidates: tokens the PPO clip did not already take, with
    ``clip_cov_lb < cov < clip_cov_ub``; ``max(1, int(clip_cov_ratio * valid tokens))`` of them,
    drawn at random (torch's global generator), have their loss set to 0. The selection uses
    this call's tokens, so a micro-batch selects among its own (as verl does). ``clip_cov_ratio``
    must be > 0, as in verl: even a tiny ratio cuts one token when one is in the band.

    Embodied: token-level, and the covariance is over the batch's transitions: allowed (the
    paper's entropy argument is made for softmax policies, the Categorical heads).

    Metrics: ``pg_clipfrac`` is the share of valid tokens cut by covariance (not those the PPO
    clip took, as verl logs it); ``pg_clipfrac_lower`` 0.
    """
    if clip_cov_ratio <= 0:
        raise ValueError(f"clip_cov_ratio must be > 0, got {clip_cov_ratio}")
    valid = response_mask.bool()
    log_ratio = log_prob - old_log_prob
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    with torch.no_grad():
        centred_lp = log_prob - masked_mean(log_prob, valid)
        cov = (advantages - masked_mean(advantages, valid)) * centred_lp
        band = valid & (clipped <= unclipped) & (cov > clip_cov_lb) & (cov < clip_cov_ub)
        candidates = band.nonzero()
        wanted = max(int(clip_cov_ratio * int(valid.sum())), 1)
        pick = torch.randperm(len(candidates), device=candidates.device)[:wanted]
        cut = torch.zeros_like(valid)
        cut[candidates[pick, 0], candidates[pick, 1]] = True
    losses = torch.where(cut, 0.0, torch.maximum(unclipped, clipped))
    losses = weighted(losses, rollout_is_weights)
    loss = agg_loss(losses, valid, loss_agg_mode, num_tokens=num_tokens, num_seqs=num_seqs)
    return loss, _contract_metrics(losses, valid, log_ratio, clipped=cut)


@register_policy_loss("kl_cov")
def kl_cov_policy_loss(
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
    rollout_is_weights: torch.Tensor | None = None,
    kl_cov_ratio: float = 0.0002,
    ppo_kl_coef: float = 0.1,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """KL-Cov (Cui et al. 2025, arXiv 2505.22617), verl's ``loss_mode=kl_cov``: the unclipped
    surrogate ``-A r`` (``r = exp(log_prob - old_log_prob)``, not clamped; no clip at all, the
    clip options are unused), plus ``ppo_kl_coef * |log_prob - old_log_prob|`` on the
    ``max(1, int(kl_cov_ratio * valid tokens))`` valid tokens with the largest
    ``cov = (A - mean A) * (log_prob - mean log_prob)`` (means over this call's valid tokens; a
    micro-batch selects among its own, as in verl). ``kl_cov_ratio`` must be > 0, as in verl.

    Embodied: token-level, covariance over the batch's transitions: allowed (as clip_cov).

    Metrics: ``ppo_kl`` as for every loss (verl logs the mean of ``|log-ratio|`` under that name
    for kl_cov); ``pg_clipfrac``, ``pg_clipfrac_lower`` 0 (nothing is clipped).
    """
    if kl_cov_ratio <= 0:
        raise ValueError(f"kl_cov_ratio must be > 0, got {kl_cov_ratio}")
    valid = response_mask.bool()
    log_ratio = log_prob - old_log_prob
    losses = -advantages * torch.exp(log_ratio)
    with torch.no_grad():
        centred_lp = log_prob - masked_mean(log_prob, valid)
        cov = (advantages - masked_mean(advantages, valid)) * centred_lp
        cov = torch.where(valid, cov, -torch.inf)  # masked tokens are never among the top
        n_valid = int(valid.sum())
        penalised = torch.zeros_like(valid)
        if n_valid:
            top = cov.flatten().topk(max(1, int(n_valid * kl_cov_ratio))).indices
            penalised.view(-1)[top] = True
    losses = torch.where(penalised, losses + ppo_kl_coef * log_ratio.abs(), losses)
    losses = weighted(losses, rollout_is_weights)
    loss = agg_loss(losses, valid, loss_agg_mode, num_tokens=num_tokens, num_seqs=num_seqs)
    return loss, _contract_metrics(losses, valid, log_ratio)


@register_policy_loss("cispo")
def cispo_policy_loss(
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
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """CISPO (MiniMax-M1, arXiv 2506.13585), verl's ``loss_mode=cispo``: REINFORCE weighted by the
    clipped ratio, held constant: per token ``-sg(clamp(r, 1 - clip_ratio_low,
    1 + clip_ratio_high)) * A * log_prob`` with ``r = exp(clamp(log_prob - old_log_prob, -20,
    20))``. Where PPO's clip zeroes a token's gradient, CISPO keeps it (``-w A``) with the
    weight ``w`` capped. No dual-clip (``clip_ratio_c`` is unused).

    Embodied: token-level: allowed.

    Metrics: ``pg_clipfrac`` the share of valid tokens whose weight was clamped (either bound);
    ``pg_clipfrac_lower`` 0.
    """
    valid = response_mask.bool()
    log_ratio = _clamped_log_ratio(old_log_prob, log_prob)
    ratio = torch.exp(log_ratio)
    weight = torch.clamp(ratio, 1.0 - clip_ratio_low, 1.0 + clip_ratio_high).detach()
    losses = -weight * advantages * log_prob
    losses = weighted(losses, rollout_is_weights)
    loss = agg_loss(losses, valid, loss_agg_mode, num_tokens=num_tokens, num_seqs=num_seqs)
    return loss, _contract_metrics(losses, valid, log_ratio, clipped=ratio != weight)


@register_policy_loss("sapo")
def sapo_policy_loss(
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
    rollout_is_weights: torch.Tensor | None = None,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """SAPO (arXiv 2511.20347), verl's ``loss_mode=sapo``: a smooth gate in
    place of the hard clip. Per token ``-f(r, tau) * A`` with
    ``f(r, tau) = sigmoid(tau (r - 1)) * 4 / tau``, ``tau = tau_pos`` where ``A > 0`` and
    ``tau_neg`` elsewhere, ``r = exp(clamp(log_prob - old_log_prob, -20, 20))``. At ``r = 1``,
    ``f = 2 / tau`` and ``df / dlog_prob = 1``: the gradient is PPO's ``-A``; away from 1 it
    fades smoothly instead of dropping to 0. The clip options are unused.

    verl aggregates SAPO with ``seq-mean-token-mean`` whatever ``loss_agg_mode`` says; here
    ``loss_agg_mode`` is honoured (as for gspo): set ``algorithm.loss_agg_func`` to
    ``seq-mean-token-mean`` for verl's loss.

    Embodied: token-level: allowed.

    Metrics: ``pg_clipfrac``, ``pg_clipfrac_lower`` 0 (nothing is clipped).
    """
    valid = response_mask.bool()
    log_ratio = _clamped_log_ratio(old_log_prob, log_prob)
    tau = torch.where(
        advantages > 0, advantages.new_tensor(tau_pos), advantages.new_tensor(tau_neg)
    )
    gate = torch.sigmoid(tau * (torch.exp(log_ratio) - 1.0)) * (4.0 / tau)
    losses = -gate * advantages
    losses = weighted(losses, rollout_is_weights)
    loss = agg_loss(losses, valid, loss_agg_mode, num_tokens=num_tokens, num_seqs=num_seqs)
    return loss, _contract_metrics(losses, valid, log_ratio)


@register_policy_loss("geo_mean", not_embodied=SEQUENCE_RATIO)
def geo_mean_policy_loss(
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
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GMPO (Geometric-Mean Policy Optimization, arXiv 2507.20673), verl's
    ``loss_mode=geo_mean``: one term per sequence, ``-mean_t(A) * exp(mean_t(l_t))`` over its
    valid tokens, the geometric mean of clipped token ratios. ``l_t = log_prob - old_log_prob``
    (not clamped), clipped in *log* space on the side that limits the update: above at
    ``clip_ratio_high`` where ``A > 0``, below at ``-clip_ratio_low`` where ``A < 0``, and 0 where
    ``A = 0`` (so the ratio band is ``[e^-low, e^high]``, not PPO's). No dual-clip.

    Aggregation is per sequence whatever ``loss_agg_mode`` says (verl: "not used"): the sum over
    non-empty sequences divided by ``num_seqs`` (the mini-batch's, for micro-batches). verl
    takes the mean over all rows, the same when no row is empty.

    Embodied: refused; see ``SEQUENCE_RATIO``.

    Metrics: ``pg_clipfrac`` / ``pg_clipfrac_lower``: shares of valid tokens with ``l`` outside
    ``[-low, high]`` and ``A > 0`` / ``A < 0`` (as verl counts them, whichever side).
    """
    valid = response_mask.bool()
    log_ratio = log_prob - old_log_prob
    bounded = torch.clamp(log_ratio, -clip_ratio_low, clip_ratio_high)
    sign = torch.sign(advantages)
    kept = sign * torch.minimum(sign * log_ratio, sign * bounded)
    lengths = valid.sum(-1).clamp_min(1).to(log_prob.dtype)
    seq_ratio = torch.exp(masked_sum(kept, valid, dim=-1) / lengths)
    seq_adv = masked_sum(advantages, valid, dim=-1) / lengths
    seq_losses = torch.where(valid.any(-1), -seq_adv * seq_ratio, 0.0)
    if rollout_is_weights is not None:  # one weight per sequence: the tokens' geometric mean
        log_w = masked_sum(torch.log(rollout_is_weights.to(log_prob.dtype) + 1e-10), valid, dim=-1)
        seq_losses = seq_losses * torch.exp(log_w / lengths)
    seqs = count_seqs(valid) if num_seqs is None else num_seqs
    loss = seq_losses.sum() / max(seqs, 1)
    out_of_band = log_ratio != bounded
    return loss, _contract_metrics(
        log_ratio, valid, log_ratio, out_of_band & (advantages > 0), out_of_band & (advantages < 0)
    )


# the importance-weight truncation c of DPPO when clip_ratio_c is null: 3, as a verl run gets it
# (its code falls back to 20, the paper's advice (Section 5.4), only for a config without the
# key, and verl's actor config always has it, at 3.0)
DPPO_TRUNCATION = 3.0
POLICY_PROBABILITY = (
    "its trust region is on the sampled action's probability exp(log_prob), and an embodied "
    "action's log-prob can be a density (the Gaussian head of a Box action space), where that is "
    "no probability and the binary divergence is undefined; use ppo or cispo"
)


def _dppo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    inside: torch.Tensor,
    clip_ratio_c: float | None,
    agg: dict[str, Any],
    rollout_is_weights: torch.Tensor | None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """DPPO's loss given its trust region ``inside`` (see ``dppo_tv_policy_loss``)."""
    valid = response_mask.bool()
    log_ratio = _clamped_log_ratio(old_log_prob, log_prob)
    ratio = torch.exp(log_ratio)
    cap = DPPO_TRUNCATION if clip_ratio_c is None else clip_ratio_c
    weight = torch.clamp(ratio, max=cap).detach()
    losses = weighted(torch.where(inside, -advantages * weight * log_prob, 0.0), rollout_is_weights)
    loss = agg_loss(losses, valid, **agg)
    return loss, _contract_metrics(losses, valid, log_ratio, ~inside, (ratio > cap) & inside)


@register_policy_loss("dppo_tv", not_embodied=POLICY_PROBABILITY)
def dppo_tv_policy_loss(
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
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """DPPO-Binary-TV (Qi et al. 2026, "Rethinking the Trust Region in LLM RL", arXiv
    2602.04879), verl's ``loss_mode=dppo_tv``: the trust region is on the sampled token's
    probability ``p = exp(log_prob)`` rather than on the ratio. A token is inside when
    ``p - p_old <= clip_ratio_high`` (``A > 0``) or ``p - p_old >= -clip_ratio_low``
    (``A <= 0``); ``clip_ratio_low`` / ``clip_ratio_high`` are these divergence thresholds here
    (verl's example uses 0.15). Per token, inside the region,
    ``-A * sg(min(r, c)) * log_prob``, whose gradient is PPO's ``-A r`` (truncated at ``c``);
    outside, 0 (no gradient). ``r = exp(clamp(log_prob - old_log_prob, -20, 20))``;
    ``c = clip_ratio_c``, or 20 when it is null (verl's default in this loss; note that verl's
    actor config itself defaults clip_ratio_c to 3, which then applies).

    Embodied: refused; see ``POLICY_PROBABILITY``.

    Metrics: ``pg_clipfrac`` the share of valid tokens outside the region;
    ``pg_clipfrac_lower`` the share inside it whose ratio was truncated at ``c``.
    """
    change = torch.exp(log_prob) - torch.exp(old_log_prob)
    inside = torch.where(advantages > 0, change <= clip_ratio_high, change >= -clip_ratio_low)
    agg = {"mode": loss_agg_mode, "num_tokens": num_tokens, "num_seqs": num_seqs}
    return _dppo(
        old_log_prob,
        log_prob,
        advantages,
        response_mask,
        inside.detach(),
        clip_ratio_c,
        agg,
        rollout_is_weights,
    )


@register_policy_loss("dppo_kl", not_embodied=POLICY_PROBABILITY)
def dppo_kl_policy_loss(
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
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """DPPO-Binary-KL (arXiv 2602.04879), verl's ``loss_mode=dppo_kl``: ``dppo_tv`` with the
    binary KL between the old and new (sampled token, everything else) distributions,
    ``D = p_old log(p_old / p) + (1 - p_old) log((1 - p_old + 1e-8) / (1 - p + 1e-8))``. A token
    is inside when ``D <= clip_ratio_high`` or ``p <= p_old`` (``A > 0``), or when
    ``D <= clip_ratio_low`` or ``p >= p_old`` (``A <= 0``): only a move in the direction the
    advantage pushes is bounded (verl's example threshold: 0.05). Loss, ``c`` and metrics as
    ``dppo_tv``.

    Embodied: refused; see ``POLICY_PROBABILITY``.
    """
    p, p_old = torch.exp(log_prob), torch.exp(old_log_prob)
    binary_kl = p_old * (old_log_prob - log_prob) + (1.0 - p_old) * torch.log(
        (1.0 - p_old + 1e-8) / (1.0 - p + 1e-8)
    )
    inside = torch.where(
        advantages > 0,
        (binary_kl <= clip_ratio_high) | (p <= p_old),
        (binary_kl <= clip_ratio_low) | (p >= p_old),
    )
    agg = {"mode": loss_agg_mode, "num_tokens": num_tokens, "num_seqs": num_seqs}
    return _dppo(
        old_log_prob,
        log_prob,
        advantages,
        response_mask,
        inside.detach(),
        clip_ratio_c,
        agg,
        rollout_is_weights,
    )


@register_policy_loss("dro")
def dro_policy_loss(
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
    rollout_is_weights: torch.Tensor | None = None,
    dro_beta: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Direct Reward Optimization as verl defines it (``loss_mode=dro``, docs/algo/dro.md): the
    plain policy gradient with a quadratic penalty on the log-ratio, per token
    ``-(A * log_prob - dro_beta / 2 * (log_prob - old_log_prob)^2)``. Its gradient,
    ``-A + dro_beta * (log_prob - old_log_prob)``, is the plain policy gradient at ``r = 1`` and
    pulls back towards the old policy as it moves away. No clip (the clip options are unused).
    ``dro_beta`` has no default (verl's neither): it must be > 0.

    Embodied: token-level: allowed.

    Metrics: ``ppo_kl``; ``pg_clipfrac``, ``pg_clipfrac_lower`` 0.
    """
    if dro_beta is None or dro_beta <= 0:
        raise ValueError(f"dro needs dro_beta > 0 (its log-ratio penalty), got {dro_beta}")
    valid = response_mask.bool()
    log_ratio = log_prob - old_log_prob
    losses = -(advantages * log_prob - 0.5 * dro_beta * log_ratio.square())
    losses = weighted(losses, rollout_is_weights)
    loss = agg_loss(losses, valid, loss_agg_mode, num_tokens=num_tokens, num_seqs=num_seqs)
    return loss, _contract_metrics(losses, valid, log_ratio)
