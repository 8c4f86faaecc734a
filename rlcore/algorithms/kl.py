"""KL estimators between the policy and the reference, and the in-reward KL coefficient controllers.

Estimators follow http://joschu.net/blog/kl-approx.html with ``d = logprob - ref_logprob`` per
token (both log-probs of the sampled token): k1 is unbiased, k2 and k3 are low-variance.
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import torch
import torch.nn.functional as F

from rlcore.did_you_mean import did_you_mean

KLKind = Literal["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "full"]
KL_KINDS: tuple[str, ...] = get_args(KLKind)


def kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-token KL estimate ``[B, T]`` between the policy and the reference.

    kind:
        ``kl`` / ``k1``: ``d``. ``abs``: ``|d|``. ``mse`` / ``k2``: ``0.5 * d**2``.
        ``low_var_kl`` / ``k3``: with ``k = clamp(ref - logprob, -20, 20)``,
        ``clamp(exp(k) - k - 1, -10, 10)`` (always >= 0, clamped for stability).
        ``full``: the exact ``KL(pi || pi_ref)`` per token; here ``logprob`` and ``ref_logprob``
        are the full log-softmax vectors ``[B, T, V]``.
    """
    if kind not in KL_KINDS:
        raise ValueError(
            f"unknown kl_penalty kind '{kind}'{did_you_mean(kind, KL_KINDS)}; "
            f"known: {', '.join(KL_KINDS)}"
        )
    if kind == "full":
        if logprob.dim() < 3 or logprob.shape != ref_logprob.shape:
            raise ValueError(
                "kl_penalty 'full' needs the full log-prob vectors [B, T, V] of both policies "
                f"(same shape), got {tuple(logprob.shape)} and {tuple(ref_logprob.shape)}"
            )
        # kl_div(input=log q, target=log p, log_target) = p * (log p - log q), summed over V.
        return F.kl_div(ref_logprob, logprob, reduction="none", log_target=True).sum(-1)
    d = logprob - ref_logprob
    if kind in ("kl", "k1"):
        return d
    if kind == "abs":
        return d.abs()
    if kind in ("mse", "k2"):
        return 0.5 * d.square()
    k = torch.clamp(-d, min=-20, max=20)
    return torch.clamp(torch.exp(k) - k - 1, min=-10, max=10)


class FixedKLController:
    """A constant in-reward KL coefficient."""

    def __init__(self, kl_coef: float) -> None:
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Nothing to adapt; present so both controllers are driven the same way."""

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value = float(state["value"])


class AdaptiveKLController:
    """Proportional controller from Ziegler et al. 2019 (used by InstructGPT).

    After each batch: ``error = clip(current_kl / target_kl - 1, -0.2, 0.2)`` and
    ``value *= 1 + error * n_steps / horizon``, so the coefficient grows while the observed KL is
    above target and shrinks while it is below.
    """

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: int) -> None:
        if target_kl <= 0 or horizon <= 0:
            raise ValueError(f"target_kl and horizon must be > 0, got {target_kl}, {horizon}")
        self.value = float(init_kl_coef)
        self.target_kl = float(target_kl)
        self.horizon = int(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Adapt the coefficient to ``current_kl`` observed over ``n_steps`` samples."""
        if not math.isfinite(current_kl):
            raise ValueError(f"AdaptiveKLController.update got a non-finite KL ({current_kl})")
        error = min(max(current_kl / self.target_kl - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value = float(state["value"])


def build_kl_controller(
    kind: Literal["fixed", "adaptive"], kl_coef: float, target_kl: float, horizon: int
) -> FixedKLController | AdaptiveKLController:
    """The controller named by ``algorithm.kl_ctrl.type``."""
    if kind == "fixed":
        return FixedKLController(kl_coef)
    if kind == "adaptive":
        return AdaptiveKLController(kl_coef, target_kl, horizon)
    raise ValueError(f"unknown kl_ctrl type '{kind}'; known: fixed, adaptive")


def scores_to_token_rewards(scores: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """``[B, T]`` rewards with each sequence's score ``[B]`` on its last valid token (the
    model's last, where tool tokens leave holes in the mask)."""
    T = response_mask.shape[-1]
    positions = torch.arange(T, device=response_mask.device)
    last = torch.where(response_mask.bool(), positions, -1).amax(-1).clamp(min=0)
    rewards = torch.zeros(response_mask.shape, dtype=torch.float32, device=scores.device)
    rewards[torch.arange(len(scores), device=scores.device), last] = scores.float()
    return rewards


def apply_kl_penalty(
    token_level_scores: torch.Tensor,
    old_log_prob: torch.Tensor,
    ref_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    kl_ctrl: FixedKLController | AdaptiveKLController,
    kl_penalty_kind: str,
) -> tuple[torch.Tensor, float]:
    """The KL in the reward (Ziegler et al. 2019, verl's ``use_kl_in_reward``): every valid token
    pays ``kl_ctrl.value * KL(policy || reference)``; then the controller adapts to the batch's
    mean per-sequence KL. Returns the rewards and that mean KL."""
    kl = kl_penalty(old_log_prob, ref_log_prob, kl_penalty_kind) * response_mask
    rewards = token_level_scores - kl_ctrl.value * kl
    per_sequence = (kl.sum(-1) / response_mask.sum(-1).clamp(min=1)).mean().item()
    kl_ctrl.update(per_sequence, n_steps=len(response_mask))
    return rewards, per_sequence
