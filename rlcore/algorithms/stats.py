"""Masked statistics over ``[B, T]`` tensors and the entropy of a categorical.

Masks are 0/1 tensors broadcastable to the data. Values at masked positions never reach a result,
even when they are NaN or inf (padding is often garbage), because they are selected away with
``torch.where`` rather than multiplied by zero.
"""

from __future__ import annotations

import torch

WHITEN_EPS = 1e-8


def _valid(mask: torch.Tensor) -> torch.Tensor:
    return mask.bool() if mask.dtype != torch.bool else mask


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``x`` over valid positions (all of them, or along ``dim``)."""
    kept = torch.where(_valid(mask), x, 0.0)
    return kept.sum() if dim is None else kept.sum(dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` over valid positions; 0 where there is no valid position.

    >>> masked_mean(torch.tensor([[1.0, 3.0, 100.0]]), torch.tensor([[1, 1, 0]]))
    tensor(2.)
    """
    valid = _valid(mask)
    if valid.shape != x.shape:
        valid = torch.broadcast_to(valid, x.shape)
    count = valid.sum(dim, dtype=x.dtype) if dim is not None else valid.sum(dtype=x.dtype)
    return masked_sum(x, valid, dim) / count.clamp_min(1)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of ``x`` over all valid positions (Bessel-corrected when ``unbiased``)."""
    n = torch.broadcast_to(_valid(mask), x.shape).sum()
    if n == 0 or (unbiased and n == 1):
        # A silent 0 or NaN here would whiten advantages into garbage without a trace.
        raise ValueError(
            f"masked_var needs at least {2 if unbiased else 1} valid positions for "
            f"{'an unbiased' if unbiased else 'a'} variance, got {int(n)}"
        )
    centered = x - masked_mean(x, mask)
    var = masked_mean(centered * centered, mask)
    return var * n / (n - 1) if unbiased else var


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """Normalise ``x`` to unit (unbiased) variance over valid positions; masked positions -> 0.

    ``(x - mean) / sqrt(var + 1e-8)``; with ``shift_mean=False`` the mean is added back, so only
    the scale changes. Needs at least two valid positions.
    """
    mean = masked_mean(x, mask)
    whitened = (x - mean) * torch.rsqrt(masked_var(x, mask, unbiased=True) + WHITEN_EPS)
    if not shift_mean:
        whitened = whitened + mean
    return torch.where(_valid(mask), whitened, torch.zeros((), dtype=x.dtype, device=x.device))


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the categorical given by ``logits`` ``[..., V]``, in nats, shape ``[...]``.

    ``-sum(p * log p)`` with ``log p = log_softmax(logits)``, which stays finite for large logits;
    tokens masked out with ``-inf`` logits contribute 0 to the value and to the gradient (not
    ``0 * -inf = NaN``). Half the cost of the ``logsumexp`` form, forward and backward (measured
    on the CartPole head: this is on every PPO step).
    """
    return entropy_from_log_probs(torch.log_softmax(logits, dim=-1))


def entropy_from_log_probs(log_p: torch.Tensor) -> torch.Tensor:
    """``entropy_from_logits`` for a caller that already holds ``log_softmax(logits)`` (a policy
    head that also needs the log-prob of its action)."""
    p = log_p.exp()
    return -(p * torch.where(p > 0, log_p, 0.0)).sum(dim=-1)


def explained_variance(
    predicted: torch.Tensor, target: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """``1 - Var(target - predicted) / Var(target)`` over valid positions (as SB3 and verl log
    it): 1 is a perfect value function, 0 no better than a constant; ``Var(target)`` is clamped
    at 1e-8, so constant targets give a finite number."""
    valid = _valid(mask)
    residual, kept = (target - predicted)[valid], target[valid]
    return 1 - residual.var() / kept.var().clamp_min(1e-8)
