"""Batches of prompts and responses, as the reasoning workers pass them around.

A batch is a dict whose tensors share their first dimension (one row per response):

- ``input_ids`` / ``attention_mask`` / ``position_ids``: ``[B, P + R]``, the prompt left-padded to
  ``P`` tokens, then the response right-padded to ``R`` tokens;
- ``responses`` / ``response_mask``: ``[B, R]``, the generated tokens, 1 up to and including
  the first end-of-sequence token;
- later stages add ``[B, R]`` tensors (``old_log_probs``, ``values``, ``advantages`` ...) and
  ``[B]`` ones (``scores``).

Lists (``answers``) ride along and are sliced with the tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

Batch = dict[str, Any]


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` ``[B, P]`` with each prompt right-aligned."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        if prompt:
            ids[row, width - len(prompt) :] = torch.as_tensor(prompt)
            mask[row, width - len(prompt) :] = 1
    return ids, mask


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions counted over real tokens only, so left padding does not shift them."""
    return (attention_mask.cumsum(-1) - 1).clamp(min=0)


def response_mask(responses: torch.Tensor, eos_id: int | Sequence[int]) -> torch.Tensor:
    """1 on every token up to and including the first end-of-sequence token, 0 after it."""
    ends = torch.isin(responses, torch.as_tensor(eos_id, device=responses.device))
    before_end = ends.long().cumsum(-1) - ends.long()  # ends strictly before each position
    return (before_end == 0).long()


def response_logits(model: Any, batch: Batch, response_length: int) -> torch.Tensor:
    """Logits ``[B, R, V]`` that predict each response token (the position before it)."""
    out = model(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        position_ids=batch["position_ids"],
        use_cache=False,
    )
    return out.logits[:, -response_length - 1 : -1]


def token_log_probs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``log softmax(logits)[token]`` per position, in float32 whatever the model's dtype."""
    logits = logits.float()
    return logits.gather(-1, tokens[..., None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def entropy(logits: torch.Tensor) -> torch.Tensor:
    logits = logits.float()
    return torch.logsumexp(logits, -1) - (F.softmax(logits, -1) * logits).sum(-1)


def batch_size(batch: Batch) -> int:
    """Rows in ``batch``: the length of its first tensor."""
    return next(len(v) for v in batch.values() if isinstance(v, torch.Tensor))


def select(batch: Batch, index: torch.Tensor | slice) -> Batch:
    """The rows ``index`` of every tensor and list in ``batch``."""
    rows = index.tolist() if isinstance(index, torch.Tensor) else None
    picked: Batch = {}
    for name, value in batch.items():
        if isinstance(value, torch.Tensor):
            picked[name] = value[index]
        elif rows is not None:
            picked[name] = [value[i] for i in rows]
        else:
            picked[name] = value[index]
    return picked


def split(batch: Batch, parts: int) -> list[Batch]:
    """``parts`` contiguous shards of equal size (the batch size must divide)."""
    size = batch_size(batch)
    if size % parts:
        raise ValueError(f"a batch of {size} cannot be split evenly over {parts} ranks")
    step = size // parts
    return [select(batch, slice(i * step, (i + 1) * step)) for i in range(parts)]


def concat(batches: Sequence[Batch]) -> Batch:
    merged: Batch = {}
    for name in batches[0]:
        values = [b[name] for b in batches]
        if isinstance(values[0], torch.Tensor):
            merged[name] = torch.cat(values)
        else:
            merged[name] = [item for v in values for item in v]
    return merged


def micro_batches(batch: Batch, size: int) -> list[Batch]:
    total = batch_size(batch)
    return [select(batch, slice(start, start + size)) for start in range(0, total, size)]
