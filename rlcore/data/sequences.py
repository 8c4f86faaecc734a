"""Token sequences of the reasoning batch: padding, positions, the response mask, and the
log-probs of response tokens. A batch is a ``TensorDict`` with one row per response:

- ``input_ids`` / ``attention_mask`` / ``position_ids``: ``[B, P + R]``, the prompt left-padded to
  ``P`` tokens, then the response right-padded to ``R`` tokens;
- ``responses`` / ``response_mask``: ``[B, R]``, the generated tokens, 1 up to and including
  the first end-of-sequence token;
- later stages add ``[B, R]`` tensors (``old_log_probs``, ``values``, ``advantages`` ...) and
  ``[B]`` ones (``index``: the row's group, ``scores``).

``answers`` rides along as non-tensor data, split and indexed with the rows.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Sequence
from typing import Any

import torch

from rlcore.data.packing import (
    cache_inputs,
    inner_model,
    one_row_kernel,
    output_cache,
    pack,
    prompt_copies,
)


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


def concat_generated(batches: Sequence[Any], pad_id: int) -> Any:
    """Generated batches joined row-wise, each one's prompts first left-padded to the widest
    batch's (prompt batches are padded to their own longest prompt; the responses all have
    the same width)."""
    full = max(b["input_ids"].shape[1] for b in batches)
    padded = []
    for batch in batches:
        extra = full - batch["input_ids"].shape[1]
        if extra:
            batch = batch.clone(recurse=False)
            for key, fill in (("input_ids", pad_id), ("attention_mask", 0), ("position_ids", 0)):
                batch.set(
                    key, torch.nn.functional.pad(batch[key], (extra, 0), value=fill), inplace=False
                )
        padded.append(batch)
    return torch.cat(padded)


def trim_padding(batch: Any) -> Any:
    """A batch (as generated, or a training or forward micro-batch) without the columns that are
    padding in all its rows: left of the prompts (positions are explicit, so nothing moves) and
    right of the responses, which no pass then pays for.
    Its ``[B, R]`` tensors are those as wide as ``responses``; its ``[B, P + R]`` ones those as
    wide as ``input_ids``. The same log-probs and values, for fewer positions."""
    full, width = batch["input_ids"].shape[1], batch["responses"].shape[1]
    prompt = batch["attention_mask"][:, : full - width]
    left = int((prompt.sum(0) == 0).long().cumprod(0).sum())  # leading all-padding columns
    longest = max(1, int(batch["response_mask"].sum(-1).max()))
    right = width - longest
    if not left and not right:
        return batch
    out = batch.clone(recurse=False)
    for key, value in batch.items():
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
    full, width = batch["input_ids"].shape[1], batch["responses"].shape[1]
    prompts = batch["attention_mask"][:, : full - width].sum(-1).tolist()
    responses = batch["response_mask"].sum(-1).clamp(min=1).tolist()
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


def response_logits(
    model: Any, batch: Any, response_length: int, packed: bool = False, share_prompts: bool = False
) -> torch.Tensor:
    """Logits ``[B, R, V]`` that predict each response token (the position before it). Where the
    model takes ``logits_to_keep`` (transformers' causal LMs), the output projection runs on
    those positions only, not on the prompt's. ``packed``: the sequences packed (``packing``),
    no padding computed; ``share_prompts``: each distinct prompt computed once
    (``shared_prompt_logits``); the same logits."""
    if share_prompts:
        return shared_prompt_logits(model, batch)
    keeps = _keeps_logits(type(inner_model(model)))
    if packed:
        rows = pack(batch, one_row_kernel(model))
        columns = rows.kept_columns() if keeps else None
        keep = {"logits_to_keep": columns} if keeps else {}
        return rows.gather(model(**rows.model_inputs(), **keep).logits, columns)
    keep = {"logits_to_keep": response_length + 1} if keeps else {}
    out = model(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        position_ids=batch["position_ids"],
        use_cache=False,
        **keep,
    )
    return out.logits[:, -response_length - 1 : -1]


def shared_prompt_logits(model: Any, batch: Any) -> torch.Tensor:
    """``response_logits`` of a batch in which rows share prompts (``prompt_copies``; as the
    full rows, when none do), each distinct prompt computed once.

    The distinct prompts pass through the model alone, keeping their keys and values (with
    their gradient: the responses' loss reaches the weights through them as through the full
    sequences); those are gathered for each row, and the responses pass on top of them,
    attending to their prompt as in the full sequence. The prompt pass's last position predicts
    each response's first token. The same logits as the full rows' (to float rounding: the sums
    run in another order), for each distinct prompt's positions once instead of once per
    response."""
    width = batch["responses"].shape[1]
    copies = prompt_copies(batch)
    if copies is None:
        return response_logits(model, batch, width)
    firsts, copy_of = copies
    cut = batch["input_ids"].shape[1] - width
    prompts = {k: batch[k][firsts, :cut] for k in ("input_ids", "attention_mask", "position_ids")}
    out = model(**prompts, use_cache=True, logits_to_keep=1)
    first = out.logits[copy_of, -1:]
    if width == 1:
        return first
    cache = output_cache(out)
    cache.batch_select_indices(copy_of)
    rest = model(
        input_ids=batch["input_ids"][:, cut:-1],
        attention_mask=batch["attention_mask"][:, :-1],
        position_ids=batch["position_ids"][:, cut:-1],
        **cache_inputs(model, cache),
        use_cache=True,
    ).logits
    return torch.cat([first, rest], dim=1)


def response_values(model: Any, batch: Any, packed: bool = False) -> torch.Tensor:
    """A value model's (one output per token) ``[B, R]`` float32 values of the response tokens:
    V(s_t) for token t is read where that token is predicted, as the logits are. ``packed``: as
    in ``response_logits``."""
    if packed:
        rows = pack(batch, one_row_kernel(model))
        return rows.gather(model(**rows.model_inputs()).logits[..., 0]).float()
    out = model(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        position_ids=batch["position_ids"],
        use_cache=False,
    )
    return out.logits[:, -batch["responses"].shape[1] - 1 : -1, 0].float()


@functools.cache
def _keeps_logits(model_type: type) -> bool:
    return "logits_to_keep" in inspect.signature(model_type.forward).parameters


def token_log_probs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``log softmax(logits)[token]`` per position, in float32 whatever the model's dtype."""
    logits = logits.float()
    return logits.gather(-1, tokens[..., None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)
