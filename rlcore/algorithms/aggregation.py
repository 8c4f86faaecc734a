"""Reduce a per-token loss ``[B, T]`` to a scalar, the four ways the field does it.

When a mini-batch is split into micro-batches for gradient accumulation, pass the mini-batch's
``num_tokens`` / ``num_seqs`` to every micro-batch: the micro-batch losses then sum exactly to
the mini-batch loss (and so do the gradients), whatever the split.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch

from rlcore.algorithms.stats import masked_sum

AggMode = Literal[
    "token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"
]
AGG_MODES: tuple[str, ...] = get_args(AggMode)


def count_tokens(loss_mask: torch.Tensor) -> int:
    """Number of valid tokens: the ``num_tokens`` of a whole mini-batch."""
    return int(loss_mask.bool().sum())


def count_seqs(loss_mask: torch.Tensor) -> int:
    """Number of non-empty sequences: the ``num_seqs`` of a whole mini-batch."""
    return int(loss_mask.bool().any(dim=-1).sum())


def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    mode: str,
    *,
    num_tokens: int | None = None,
    num_seqs: int | None = None,
) -> torch.Tensor:
    """Aggregate ``loss_mat`` ``[B, T]`` over the valid entries of ``loss_mask``.

    mode:
        ``token-mean``: sum over valid tokens / number of valid tokens (every token weighs the
        same; long answers weigh more). ``seq-mean-token-sum``: per-sequence sum, averaged over
        non-empty sequences. ``seq-mean-token-mean``: per-sequence mean, averaged over non-empty
        sequences (every sequence weighs the same). ``seq-mean-token-sum-norm``: sum over valid
        tokens / (non-empty sequences * T), a length-independent constant (Dr. GRPO; T is
        ``loss_mat``'s width: the reasoning components scale ``num_seqs`` so that it is the
        generation budget ``data.max_response_length`` whatever width a batch is cut to).

    ``num_tokens`` / ``num_seqs`` replace the counts taken from ``loss_mask`` (use the whole
    mini-batch's when this is one micro-batch of it). An empty batch gives 0, not NaN.
    """
    valid = loss_mask.bool()
    if mode == "token-mean":
        denom = count_tokens(valid) if num_tokens is None else num_tokens
        return masked_sum(loss_mat, valid) / max(denom, 1)
    seqs = count_seqs(valid) if num_seqs is None else num_seqs
    if mode == "seq-mean-token-sum":
        return masked_sum(loss_mat, valid) / max(seqs, 1)
    if mode == "seq-mean-token-mean":
        per_seq = masked_sum(loss_mat, valid, dim=-1) / valid.sum(-1).clamp_min(1)
        return per_seq.sum() / max(seqs, 1)
    if mode == "seq-mean-token-sum-norm":
        return masked_sum(loss_mat, valid) / max(seqs * loss_mat.shape[-1], 1)
    raise ValueError(f"unknown loss_agg_mode '{mode}'; known: {', '.join(AGG_MODES)}")
