"""Off-policy correction between the policy that sampled a batch and the one that trains on it.

Three policies meet when a batch is trained on: the *behaviour* policy that sampled it (the
rollout's weights and engine: ``rollout_log_probs``), the *proximal* policy (the trainer's weights
when the batch is consumed: ``old_log_probs``, recomputed) and the policy being updated. They
differ when the rollout samples with older weights (asynchronous runs, ``runner.max_staleness``)
or with another engine or precision (SGLang, bf16). PPO's ratio and clip are taken against the
proximal policy; the gap between behaviour and proximal is corrected here, per token ``t``, with
``log_ratio_t = old_log_prob_t - rollout_log_prob_t``:

- **importance weights** (``rollout_is``): ``token``: ``w_t = exp(log_ratio_t)``; ``sequence``:
  ``w = exp(sum_t log_ratio_t)`` on every token of the response. Truncated (TIS) to
  ``min(w, upper)`` for a threshold ``upper``, or, for a threshold written ``"lower_upper"``, zeroed
  outside ``[lower, upper]`` (IcePop). Optionally divided by their batch mean. The policy loss of
  each token is multiplied by its weight: with ``token`` weights and the PPO loss this is the
  decoupled PPO objective of AReaL (Fu et al., 2025), the weight's cap its truncation;
- **rejection** (``rollout_rs``): a token (``token_k*``) or a whole response (``seq_sum_k*``,
  ``seq_mean_k*``, ``seq_max_k*``) leaves the response mask when a divergence estimate of behaviour
  vs proximal passes its threshold: ``k1 = -log_ratio`` (kept inside ``[log lower, log upper]``),
  ``k2 = log_ratio² / 2``, ``k3 = exp(log_ratio) - 1 - log_ratio`` (kept at or below ``upper``);
  several options, comma-separated, must all pass;
- **metrics** of the mismatch: ``kl`` (mean of ``rollout_log_prob - old_log_prob``, KL(behaviour ||
  proximal)), ``k3_kl``, each policy's perplexity, χ² per token and per sequence, the weights'
  mean, extremes, effective sample size and the share truncated or masked.

The names, options and metrics are verl's (``algorithm.rollout_correction``,
``verl/trainer/ppo/rollout_corr_helper.py``, v0.9.1), metrics prefixed ``rollout_corr/``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rlcore.algorithms.stats import masked_mean, masked_sum

SAFETY_BOUND = 20.0  # log-space clamp before exp: weights stay within e^±20
IS_LEVELS = ("token", "sequence")
RS_OPTIONS = (
    "token_k1",
    "token_k2",
    "token_k3",
    "seq_sum_k1",
    "seq_sum_k2",
    "seq_sum_k3",
    "seq_mean_k1",
    "seq_mean_k2",
    "seq_mean_k3",
    "seq_max_k2",
    "seq_max_k3",
)


@dataclass(frozen=True)
class Bounds:
    """A threshold: ``upper``, and ``lower`` where one applies (None: no lower bound)."""

    upper: float
    lower: float | None = None


def _positive(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{what}: {text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what}: {text!r} must be a positive number")
    return value


def parse_is_threshold(spec: float | str) -> Bounds:
    """``rollout_is_threshold``: a number (TIS: weights capped there) or ``"lower_upper"``
    (IcePop: weights outside the interval zeroed)."""
    what = "rollout_is_threshold"
    if isinstance(spec, bool) or not isinstance(spec, int | float | str):
        raise ValueError(f"{what}: {spec!r} is neither a number nor 'lower_upper'")
    text = str(spec).strip()
    if "_" not in text:
        return Bounds(_positive(text, what))
    low, high = text.split("_", 1)
    bounds = Bounds(_positive(high, what), _positive(low, what))
    if bounds.lower > bounds.upper:
        raise ValueError(f"{what}: {spec!r} has its lower bound above its upper bound")
    return bounds


def parse_rs(options: str, spec: float | str | None) -> dict[str, Bounds]:
    """``rollout_rs`` (comma-separated options) with ``rollout_rs_threshold`` (one threshold for
    all, or one per option, comma-separated): each option's bounds. A ``k1`` option is kept inside
    ``[lower, upper]`` as a probability ratio (``"lower_upper"``, or one number ``u`` for
    ``[1/u, u]``); the others below one upper bound."""
    names = list(dict.fromkeys(o.strip() for o in options.split(",") if o.strip()))
    if not names:
        raise ValueError("rollout_rs: no option given")
    for name in names:
        if name not in RS_OPTIONS:
            raise ValueError(f"rollout_rs: {name!r} is not one of {', '.join(RS_OPTIONS)}")
    if spec is None:
        raise ValueError("rollout_rs_threshold: rejection needs a threshold (null given)")
    specs = [s.strip() for s in str(spec).split(",") if s.strip()]
    if len(specs) not in (1, len(names)):
        raise ValueError(
            f"rollout_rs_threshold: give one threshold for all or one per option "
            f"({len(names)}), not {len(specs)}"
        )
    specs = specs * len(names) if len(specs) == 1 else specs
    bounds = {}
    for name, text in zip(names, specs, strict=True):
        what = f"rollout_rs_threshold for {name}"
        if name.endswith("k1"):
            if "_" in text:
                low, high = text.split("_", 1)
                bound = Bounds(_positive(high, what), _positive(low, what))
            else:
                upper = _positive(text, what)
                bound = Bounds(upper, 1.0 / upper)
            if bound.lower > bound.upper:
                raise ValueError(f"{what}: {text!r} has its lower bound above its upper bound")
        else:
            if "_" in text:
                raise ValueError(f"{what}: {text!r}: a k2/k3 option takes one upper bound")
            bound = Bounds(_positive(text, what))
        bounds[name] = bound
    return bounds


def _item(x: torch.Tensor) -> float:
    return float(x.detach())


def is_weights(
    log_ratio: torch.Tensor,
    response_mask: torch.Tensor,
    level: str,
    threshold: Bounds,
    batch_normalize: bool = False,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Truncated (or IcePop-masked) importance weights ``[B, T]`` (0 on padding), and their
    metrics (unprefixed). See the module docstring."""
    if level not in IS_LEVELS:
        raise ValueError(f"rollout_is: {level!r} is not one of {', '.join(IS_LEVELS)}")
    valid = response_mask.bool()
    if level == "token":
        per_token = log_ratio
    else:
        per_token = masked_sum(log_ratio, valid, dim=-1).unsqueeze(-1).expand_as(log_ratio)
    raw = torch.exp(per_token.clamp(-SAFETY_BOUND, SAFETY_BOUND))
    raw = torch.where(valid, raw, torch.zeros_like(raw))
    if threshold.lower is None:
        weights = raw.clamp(max=threshold.upper)
        lower = 1.0 / threshold.upper
    else:
        inside = (raw >= threshold.lower) & (raw <= threshold.upper)
        weights = torch.where(inside, raw, torch.zeros_like(raw))
        lower = threshold.lower
    weights = weights.detach()
    metrics = {
        "rollout_is_mean": _item(masked_mean(weights, valid)),
        "rollout_is_max": _item(weights.masked_fill(~valid, -math.inf).max()),
        "rollout_is_min": _item(weights.masked_fill(~valid, math.inf).min()),
        # the share of tokens whose raw weight passed a bound: truncated (TIS) or zeroed (IcePop)
        "rollout_is_ratio_fraction_high": _item(
            masked_mean((raw > threshold.upper).float(), valid)
        ),
        "rollout_is_ratio_fraction_low": _item(masked_mean((raw < lower).float(), valid)),
    }
    normalised = weights / (masked_mean(weights, valid) + 1e-8)
    square = _item(masked_mean(normalised.square(), valid))  # 0: every weight is 0
    metrics["rollout_is_eff_sample_size"] = 1.0 / square if square > 0 else 0.0
    if threshold.lower is not None:
        outside = (raw < threshold.lower) | (raw > threshold.upper)
        metrics["rollout_is_oob_ratio"] = _item(masked_mean(outside.float(), valid))
    if batch_normalize:
        if level == "token":
            mean = masked_mean(weights, valid)
        else:  # one weight per response, averaged over the responses that have a token
            rows = valid.any(-1)
            mean = masked_mean(weights, valid, dim=-1)[rows].mean() if rows.any() else weights.sum()
        factor = _item(mean)
        if factor > 1e-8:
            weights = weights / mean
        metrics["rollout_is_batch_norm_factor"] = factor if factor > 1e-8 else 1.0
    return weights, metrics


def rejection_mask(
    log_ratio: torch.Tensor, response_mask: torch.Tensor, options: dict[str, Bounds]
) -> tuple[torch.Tensor, dict[str, float]]:
    """``response_mask`` with the tokens (or whole responses) that fail an option removed, and
    the share removed, per option and in all (unprefixed metrics)."""
    valid = response_mask.bool()
    safe = log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    token_stat = {"k1": -safe, "k2": 0.5 * safe.square(), "k3": torch.exp(safe) - 1.0 - safe}
    keep_all = torch.ones_like(valid)
    metrics: dict[str, float] = {}
    for name, bound in options.items():
        level, kind = name.rsplit("_", 1)
        stat = token_stat[kind]
        if level == "seq_sum":
            stat = masked_sum(stat, valid, dim=-1).unsqueeze(-1)
        elif level == "seq_mean":
            stat = masked_mean(stat, valid, dim=-1).unsqueeze(-1)
        elif level == "seq_max":
            stat = stat.masked_fill(~valid, -math.inf).amax(-1, keepdim=True)
            stat = torch.where(torch.isinf(stat), torch.zeros_like(stat), stat)
        if kind == "k1":
            keep = (stat >= math.log(bound.lower)) & (stat <= math.log(bound.upper))
        else:
            keep = stat <= bound.upper
        keep = keep.expand_as(valid)
        keep_all = keep_all & keep
        metrics[f"rollout_rs_{name}_mean"] = _item(masked_mean(stat.expand_as(log_ratio), valid))
        metrics[f"rollout_rs_{name}_masked_fraction"] = _item(masked_mean((~keep).float(), valid))
        metrics[f"rollout_rs_{name}_seq_masked_fraction"] = _seq_share(~keep & valid, valid)
    metrics["rollout_rs_masked_fraction"] = _item(masked_mean((~keep_all).float(), valid))
    metrics["rollout_rs_seq_masked_fraction"] = _item((~keep_all & valid).any(-1).float().mean())
    return (response_mask * keep_all.to(response_mask.dtype)), metrics


def _seq_share(removed: torch.Tensor, valid: torch.Tensor) -> float:
    """The share of responses (with a token) that lost a token."""
    rows = valid.any(-1)
    return _item(removed.any(-1)[rows].float().mean()) if rows.any() else 0.0


def mismatch_metrics(
    old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, response_mask: torch.Tensor
) -> dict[str, float]:
    """How far the behaviour policy is from the proximal one (unprefixed; verl's names)."""
    valid = response_mask.bool()
    log_ratio = old_log_probs - rollout_log_probs
    safe = log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    train_mean = masked_mean(old_log_probs, valid, dim=-1)
    rollout_mean = masked_mean(rollout_log_probs, valid, dim=-1)
    log_ppl_diff = rollout_mean - train_mean
    seq_log_ratio = masked_sum(log_ratio, valid, dim=-1).clamp(-SAFETY_BOUND, SAFETY_BOUND)
    return {
        "kl": _item(masked_mean(-log_ratio, valid)),
        "k3_kl": _item(masked_mean(torch.exp(log_ratio) - log_ratio - 1.0, valid)),
        "training_ppl": _item(torch.exp(-train_mean).mean()),
        "rollout_ppl": _item(torch.exp(-rollout_mean).mean()),
        "log_ppl_diff": _item(log_ppl_diff.mean()),
        "log_ppl_abs_diff": _item(log_ppl_diff.abs().mean()),
        "chi2_token": _item(masked_mean(torch.exp(safe).square(), valid) - 1.0),
        "chi2_seq": _item(torch.exp(2.0 * seq_log_ratio).mean() - 1.0),
    }


def rollout_correction(
    old_log_probs: torch.Tensor,
    rollout_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    rollout_is: str | None = None,
    rollout_is_threshold: float | str = 2.0,
    rollout_is_batch_normalize: bool = False,
    rollout_rs: str | None = None,
    rollout_rs_threshold: float | str | None = None,
) -> tuple[torch.Tensor | None, torch.Tensor, dict[str, float]]:
    """The weights (None without ``rollout_is``), the response mask after rejection (the given
    one without ``rollout_rs``) and the ``rollout_corr/`` metrics of one batch."""
    if old_log_probs.shape != rollout_log_probs.shape:
        raise ValueError(
            f"old_log_probs {tuple(old_log_probs.shape)} and rollout_log_probs "
            f"{tuple(rollout_log_probs.shape)} differ in shape"
        )
    log_ratio = (old_log_probs - rollout_log_probs).float()
    metrics: dict[str, float] = {}
    weights = None
    if rollout_is is not None:
        weights, found = is_weights(
            log_ratio,
            response_mask,
            rollout_is,
            parse_is_threshold(rollout_is_threshold),
            rollout_is_batch_normalize,
        )
        metrics.update(found)
    mask = response_mask
    if rollout_rs is not None:
        mask, found = rejection_mask(
            log_ratio, response_mask, parse_rs(rollout_rs, rollout_rs_threshold)
        )
        metrics.update(found)
    metrics.update(
        mismatch_metrics(old_log_probs.float(), rollout_log_probs.float(), response_mask)
    )
    return weights, mask, {f"rollout_corr/{k}": v for k, v in metrics.items()}
