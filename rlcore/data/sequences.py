"""Token sequences of the reasoning batch: padding, positions, the response mask, cutting a batch's
all-padding columns and forming micro-batches by a token budget (the model's forward passes over
it are ``rlcore.models.forward``'s). A batch is a ``TensorDict`` with one row per response:

- ``input_ids`` / ``attention_mask`` / ``position_ids``: ``[B, P + R]``, the prompt left-padded to
  ``P`` tokens, then the response right-padded to ``R`` tokens;
- ``responses`` / ``response_mask``: ``[B, R]``, the generated tokens, 1 up to and including
  the first end-of-sequence token;
- later stages add ``[B, R]`` tensors (``old_log_probs``, ``values``, ``advantages`` ...) and
  ``[B]`` ones (``index``: the row's group, ``scores``).

``answers`` rides along as non-tensor data, split and indexed with the rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.nn.utils.rnn import pad_sequence

from rlcore.columns import (
    ATTENTION_MASK,
    IMAGE_COLUMNS,
    INPUT_IDS,
    LOSS_MASK,
    POSITION_IDS,
    RESPONSE_MASK,
    RESPONSES,
    ROLLOUT_LOG_PROBS,
    ROUTED_EXPERTS,
)


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` ``[B, P]`` with each prompt right-aligned (torch's
    ``pad_sequence`` on the left)."""
    ids = [torch.as_tensor(p, dtype=torch.long) for p in prompts]
    ones = [torch.ones(len(p), dtype=torch.long) for p in ids]
    padded = pad_sequence(ids, batch_first=True, padding_value=pad_id, padding_side="left")
    mask = pad_sequence(ones, batch_first=True, padding_value=0, padding_side="left")
    return padded, mask


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions counted over real tokens only, so left padding does not shift them."""
    return (attention_mask.cumsum(-1) - 1).clamp(min=0)


def response_mask(responses: torch.Tensor, eos_id: int | Sequence[int]) -> torch.Tensor:
    """1 on every token up to and including the first end-of-sequence token, 0 after it."""
    ends = torch.isin(responses, torch.as_tensor(eos_id, device=responses.device))
    before_end = ends.long().cumsum(-1) - ends.long()  # ends strictly before each position
    return (before_end == 0).long()


def generated_layout(
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    responses: torch.Tensor,
    eos_ids: Sequence[int],
    pad_id: int,
    log_probs: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """A generated batch's tensors, as every engine returns them: left-padded prompts
    ``[B, P]`` and responses ``[B, R]`` (anything after a row's first end-of-sequence token
    becomes padding) joined into ``input_ids`` / ``attention_mask`` / ``position_ids``
    ``[B, P + R]``, with ``response_mask`` and ``loss_mask`` (one turn: every response token is
    the model's) and, given each token's log-prob, ``rollout_log_probs`` (0 on padding)."""
    mask = response_mask(responses, eos_ids)
    responses = torch.where(mask.bool(), responses, pad_id)
    return joined_layout(prompt_ids, prompt_mask, responses, mask, mask.clone(), log_probs)


def joined_layout(
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    responses: torch.Tensor,
    mask: torch.Tensor,
    loss_mask: torch.Tensor,
    log_probs: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """``generated_layout``'s tensors from responses already padded, their ``mask`` (the
    response's tokens) and ``loss_mask`` (those the model wrote: a multi-turn response's tool
    output is not); ``rollout_log_probs`` are 0 where the loss mask is."""
    attention = torch.cat([prompt_mask, mask], dim=1)
    out = {
        INPUT_IDS: torch.cat([prompt_ids, responses], dim=1),
        ATTENTION_MASK: attention,
        POSITION_IDS: position_ids(attention),
        RESPONSES: responses,
        RESPONSE_MASK: mask,
        LOSS_MASK: loss_mask,
    }
    if log_probs is not None:
        out[ROLLOUT_LOG_PROBS] = log_probs * loss_mask
    return out


def concat_generated(batches: Sequence[Any], pad_id: int) -> Any:
    """Generated batches joined row-wise, each one's prompts first left-padded to the widest
    batch's (prompt batches are padded to their own longest prompt; the responses all have
    the same width)."""
    full = max(b[INPUT_IDS].shape[1] for b in batches)
    padded = []
    for batch in batches:
        extra = full - batch[INPUT_IDS].shape[1]
        if extra:
            batch = batch.clone(recurse=False)
            for key, fill in (
                (INPUT_IDS, pad_id),
                (ATTENTION_MASK, 0),
                (POSITION_IDS, 0),
                (ROUTED_EXPERTS, -1),
            ):
                if key in batch:  # (padded on the left along the token dimension)
                    value = batch[key]
                    spread = (0, 0) * (value.dim() - 2) + (extra, 0)
                    padded_value = torch.nn.functional.pad(value, spread, value=fill)
                    batch.set(key, padded_value, inplace=False)
        padded.append(batch)
    return torch.cat(padded)


def trim_padding(batch: Any) -> Any:
    """A batch (as generated, or a training or forward micro-batch) without the columns that are
    padding in all its rows: left of the prompts (positions are explicit, so nothing moves) and
    right of the responses, which no pass then pays for.
    Its ``[B, R]`` tensors are those as wide as ``responses``; its ``[B, P + R]`` ones those as
    wide as ``input_ids``. The same log-probs and values, for fewer positions."""
    full, width = batch[INPUT_IDS].shape[1], batch[RESPONSES].shape[1]
    prompt = batch[ATTENTION_MASK][:, : full - width]
    left = int((prompt.sum(0) == 0).long().cumprod(0).sum())  # leading all-padding columns
    longest = max(1, int(batch[RESPONSE_MASK].sum(-1).max()))
    right = width - longest
    if not left and not right:
        return batch
    out = batch.clone(recurse=False)
    for key, value in batch.items():
        if key in IMAGE_COLUMNS:  # (a row's images, whatever their count)
            continue
        if isinstance(value, torch.Tensor) and value.dim() > 1:
            if value.shape[1] == full:
                out.set(key, value[:, left : full - right], inplace=False)
            elif value.shape[1] == width:
                out.set(key, value[:, :longest], inplace=False)
    return out


def token_budget_split(batch: Any, budget: int) -> list[torch.Tensor]:
    """Row indices of micro-batches that each hold at most ``budget`` token positions once
    their padding is cut (``trim_padding``: rows x (longest prompt + longest response)); a row
    longer than the budget goes alone. Rows are taken longest first, so each micro-batch holds
    rows of like lengths."""
    full, width = batch[INPUT_IDS].shape[1], batch[RESPONSES].shape[1]
    prompts = batch[ATTENTION_MASK][:, : full - width].sum(-1).tolist()
    responses = batch[RESPONSE_MASK].sum(-1).clamp(min=1).tolist()
    order = sorted(range(len(prompts)), key=lambda i: prompts[i] + responses[i], reverse=True)
    parts: list[list[int]] = []
    longest_p = longest_r = 0
    for i in order:
        p, r = max(longest_p, prompts[i]), max(longest_r, responses[i])
        if parts and (len(parts[-1]) + 1) * (p + r) <= budget:
            parts[-1].append(i)
            longest_p, longest_r = p, r
        else:
            parts.append([i])
            longest_p, longest_r = prompts[i], responses[i]
    return [torch.tensor(part) for part in parts]
