"""Ulysses sequence parallelism (DeepSpeed-Ulysses; verl's ``ulysses_sequence_parallel_size``):
the ranks of a group each compute a contiguous slice of the columns of every packed row, so one
rank's activations are a ``1/P`` share of a long response's.

Only attention mixes positions. Before it, each rank holds all heads of its slice of the
sequence; one ``all_to_all`` trades that for a ``1/P`` share of the heads over the whole
sequence, attention runs there (causal within each packed sequence, read from the rows' full
positions), and a second ``all_to_all`` trades back. Everything else (embeddings, norms, MLPs,
rotary positions from each token's own position, the LM head) is per token and runs on the
slice as it is. Both all-to-alls are differentiable (``torch.distributed.nn``), so the backward
pass sends each key's and value's gradient back to the rank that holds its token.

The model attends through ``NAME``, registered with transformers' attention and mask
interfaces; ``sharded`` switches a model to it for a pass. The heads must divide by the group's
size (key/value heads are repeated to the query heads first). The response tokens' log-probs are
computed where their predicting position lies and summed over the group (``across_group``:
forward a sum, backward the gradient as it is, since every rank then computes the same loss).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

NAME = "rlcore_ulysses"


@dataclass(frozen=True)
class _Pass:
    group: Any
    size: int
    # per row, the [start, end) columns of each packed sequence (and one of the padding after)
    segments: list[list[tuple[int, int]]]


def segments(positions: torch.Tensor, valid: torch.Tensor) -> list[list[tuple[int, int]]]:
    """Per row of ``positions`` ``[rows, W]``, the ``[start, end)`` columns of each packed
    sequence (a real token, ``valid``, at position 0 starts one) and of each run of padding
    (attended within itself: its outputs are never read)."""
    out = []
    for row, real in zip(positions.tolist(), valid.tolist(), strict=True):
        starts = [
            c
            for c, (p, v) in enumerate(zip(row, real, strict=True))
            if (v and p == 0) or (c > 0 and v != real[c - 1]) or c == 0
        ]
        out.append(list(itertools.pairwise([*starts, len(row)])))
    return out


_active: _Pass | None = None


def _heads_for_sequence(t: torch.Tensor, sp: _Pass) -> torch.Tensor:
    """``[B, H, S/P, D]`` (all heads of this rank's slice) -> ``[B, H/P, S, D]`` (this rank's
    share of the heads over the whole sequence)."""
    from torch.distributed.nn.functional import all_to_all_single

    b, h, s, d = t.shape
    chunks = t.reshape(b, sp.size, h // sp.size, s, d).transpose(0, 1).contiguous()
    got = all_to_all_single(torch.empty_like(chunks), chunks, group=sp.group)
    # got[p]: rank p's slice of the sequence, this rank's heads
    return got.permute(1, 2, 0, 3, 4).reshape(b, h // sp.size, sp.size * s, d)


def _sequence_for_heads(t: torch.Tensor, sp: _Pass) -> torch.Tensor:
    """The inverse of ``_heads_for_sequence``: ``[B, H/P, S, D]`` -> ``[B, H, S/P, D]``."""
    from torch.distributed.nn.functional import all_to_all_single

    b, hp, s_all, d = t.shape
    s = s_all // sp.size
    chunks = t.reshape(b, hp, sp.size, s, d).permute(2, 0, 1, 3, 4).contiguous()
    got = all_to_all_single(torch.empty_like(chunks), chunks, group=sp.group)
    # got[p]: rank p's share of the heads, this rank's slice of the sequence
    return got.transpose(0, 1).reshape(b, hp * sp.size, s, d)


def attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention interface under ``sharded``: ``[B, H, S/P, D]`` queries (and
    key/value heads) in, ``[B, S/P, H, D]`` out."""
    sp = _active
    if sp is None:
        raise RuntimeError(f"attention {NAME!r} outside rlcore.models.ulysses.sharded")
    groups = getattr(module, "num_key_value_groups", 1)
    if groups > 1:
        key, value = (t.repeat_interleave(groups, dim=1) for t in (key, value))
    q, k, v = (_heads_for_sequence(t, sp) for t in (query, key, value))
    # causal within each packed sequence: one kernel call a sequence, no mask (a [W, W] mask
    # would be kept for the backward pass, as large as the attention it spares)
    rows = []
    for b, spans in enumerate(sp.segments):
        parts = [
            F.scaled_dot_product_attention(
                q[b : b + 1, :, s:e],
                k[b : b + 1, :, s:e],
                v[b : b + 1, :, s:e],
                dropout_p=dropout,
                is_causal=True,
                scale=scaling,
            )
            for s, e in spans
        ]
        rows.append(torch.cat(parts, dim=2))
    out = torch.cat(rows, dim=0)
    return _sequence_for_heads(out, sp).transpose(1, 2).contiguous(), None


def _no_mask(*args: Any, **kwargs: Any) -> None:
    """The mask interface's entry: none (``attention`` keeps each packed sequence apart by
    calling the kernel a sequence at a time)."""
    return None


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(NAME, attention)
    AttentionMaskInterface.register(NAME, _no_mask)


def refusal(config: Any, size: int) -> str | None:
    """Why a model of ``config`` cannot be split over ``size`` ranks (None when it can)."""
    heads = getattr(config, "num_attention_heads", None)
    if heads is None or heads % size:
        return f"its {heads} attention heads do not divide by {size}"
    return None


def columns(width: int, size: int, rank: int) -> slice:
    """This rank's columns of rows ``width`` wide padded to a multiple of ``size``."""
    per = -(-width // size)
    return slice(rank * per, (rank + 1) * per)


def padded(t: torch.Tensor, size: int, fill: int = 0) -> torch.Tensor:
    """``[rows, W, ...]`` padded on the right to a multiple of ``size`` columns."""
    extra = -t.shape[1] % size
    if not extra:
        return t
    spread = (0, 0) * (t.dim() - 2) + (0, extra)
    return F.pad(t, spread, value=fill)


@contextlib.contextmanager
def sharded(model: Any, group: Any, positions: torch.Tensor, valid: torch.Tensor) -> Iterator[None]:
    """Within it, ``model`` attends across ``group``'s ranks: each calls it on its own
    ``columns`` of the packed rows, whose full ``positions`` and ``valid`` (real tokens, not
    padding) it is given, padded as the inputs."""
    from rlcore.models.forward import inner_model

    global _active
    _register()
    size = dist.get_world_size(group)
    base = inner_model(model)  # (under peft or data parallel: the transformers model)
    before = base.config._attn_implementation
    base.set_attn_implementation(NAME)
    _active = _Pass(group, size, segments(positions, valid))
    try:
        yield
    finally:
        _active = None
        base.set_attn_implementation(before)


class _SumAcross(torch.autograd.Function):
    """Forward: the sum over the group's ranks; backward: the gradient as it is (every rank
    computes the same loss from the sum, so each passes its own part's gradient back)."""

    @staticmethod
    def forward(ctx: Any, t: torch.Tensor, group: Any) -> torch.Tensor:
        out = t.clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


def across_group(t: torch.Tensor, group: Any) -> torch.Tensor:
    """``t`` summed over ``group`` (each rank's holds its own positions' values, 0 elsewhere)."""
    return _SumAcross.apply(t, group)


def _split_pass(model: Any, batch: Any, group: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's part of a packed pass of ``batch`` split over ``group``: the model's outputs
    at the positions predicting the response tokens that lie in its columns ``[n, ...]``, and
    which those are (``[B, R]`` bool)."""
    from rlcore.columns import PIXEL_VALUES
    from rlcore.data.packing import pack

    if PIXEL_VALUES in batch:  # (each rank would need the features of its columns' images)
        raise NotImplementedError("Ulysses sequence parallelism: prompts with images")
    size, rank = dist.get_world_size(group), dist.get_rank(group)
    rows = pack(batch)
    inputs = rows.model_inputs()
    ids, positions = padded(inputs["input_ids"], size), padded(inputs["position_ids"], size)
    valid = padded(rows.valid.view(ids.shape[0], -1), size, fill=False)
    mine = columns(ids.shape[1], size, rank)
    with sharded(model, group, positions, valid):
        out = model(
            input_ids=ids[:, mine],
            position_ids=positions[:, mine],
            attention_mask=None,
            use_cache=False,
        ).logits
    row, column = rows.predictors // rows.width, rows.predictors % rows.width
    here = (column >= mine.start) & (column < mine.stop)  # [B, R]: predicted on this rank
    return out[row[here], column[here] - mine.start], here


def _gathered(part: torch.Tensor, here: torch.Tensor, group: Any) -> torch.Tensor:
    """``[B, R]`` float32 of every rank's ``part`` (its values where ``here``), on every rank."""
    full = torch.zeros(here.shape, dtype=torch.float32, device=part.device)
    return across_group(full.index_put(here.nonzero(as_tuple=True), part.float()), group)


def packed_log_probs(
    model: Any, batch: Any, group: Any, temperature: float = 1.0, entropy: bool = True
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The response tokens' ``[B, R]`` log-probs (and entropies) of a packed pass split over
    ``group``: every rank calls it with the same ``batch`` and gets the same tensors, each
    having computed its ``1/P`` of the columns."""
    from rlcore.algorithms.stats import entropy_from_logits
    from rlcore.columns import RESPONSES
    from rlcore.models.forward import token_log_probs

    logits, here = _split_pass(model, batch, group)
    picked = logits / temperature  # [n, V]
    logp = _gathered(token_log_probs(picked, batch[RESPONSES][here]), here, group)
    if not entropy:
        return logp, None
    return logp, _gathered(entropy_from_logits(picked.float()), here, group)


def packed_values(model: Any, batch: Any, group: Any) -> torch.Tensor:
    """A value model's ``[B, R]`` float32 values of the response tokens (read where each token is
    predicted, as ``rlcore.models.forward.response_values``) from a packed pass split over
    ``group``, on every rank."""
    out, here = _split_pass(model, batch, group)
    return _gathered(out[..., 0], here, group)
