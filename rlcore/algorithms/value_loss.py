"""Value loss for a critic or a value head: clipped squared error or clipped Huber."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rlcore.algorithms.aggregation import agg_loss
from rlcore.algorithms.stats import masked_mean


def value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    old_values: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    value_clip: float | None = None,
    huber_delta: float | None = None,
    loss_agg_mode: str = "token-mean",
    num_tokens: int | None = None,
    num_seqs: int | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Pessimistic clipped value loss, all tensors ``[B, T]``.

    The clipped prediction is ``v_c = clamp(v, old - value_clip, old + value_clip)`` (the
    prediction itself is clamped, so inside the band ``v_c == v`` exactly). Per token:
    squared error ``0.5 * max((v - R)**2, (v_c - R)**2)`` when ``huber_delta`` is None, else
    ``max(huber(R - v), huber(R - v_c))`` with ``huber(x) = 0.5 x**2`` for ``|x| <= delta`` and
    ``delta * (|x| - delta / 2)`` beyond. ``value_clip=None`` turns clipping off.

    Metrics:
        ``vf_clipfrac``: share of valid tokens where the clipped term was taken (its loss is
        larger than the unclipped one's), as ``pg_clipfrac`` counts it for the policy and as
        verl computes it: the tokens whose gradient the clipping cut.
        ``vpred_mean``: masked mean of the predictions.
    """
    valid = response_mask.bool()
    clipped = (
        vpreds
        if value_clip is None
        else torch.clamp(vpreds, old_values - value_clip, old_values + value_clip)
    )
    if huber_delta is None:
        unclipped_losses, clipped_losses = (
            0.5 * (vpreds - returns) ** 2,
            0.5 * (clipped - returns) ** 2,
        )
    else:
        unclipped_losses = F.huber_loss(vpreds, returns, reduction="none", delta=huber_delta)
        clipped_losses = F.huber_loss(clipped, returns, reduction="none", delta=huber_delta)
    losses = torch.maximum(unclipped_losses, clipped_losses)
    took_clipped = clipped_losses > unclipped_losses
    loss = agg_loss(losses, valid, loss_agg_mode, num_tokens=num_tokens, num_seqs=num_seqs)
    with torch.no_grad():  # metrics: no autograd graph to build
        metrics = {
            "vf_clipfrac": masked_mean(took_clipped.to(losses.dtype), valid),
            "vpred_mean": masked_mean(vpreds, valid),
        }
    return loss, metrics
