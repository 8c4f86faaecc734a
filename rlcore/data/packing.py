"""Sequence packing (verl's ``use_remove_padding``): the real tokens of a padded micro-batch laid
end to end in a few rows, each sequence's positions restarting at its own start, so no pass
computes a padding token.

transformers keeps packed sequences apart by their positions: with no attention mask, a
position that does not follow the one before it starts a new sequence, and attention stays
within each (``masking_utils.find_packed_sequence_indices`` for the eager and sdpa kernels, the
variable-length kernel for flash attention, which needs one row). So the packed pass computes
the padded pass's logits and values, for the real tokens only.

Rows: one row under flash attention; otherwise rows as long as the micro-batch's longest
sequence, filled first-fit by decreasing length. The eager and sdpa kernels build a dense mask
per row, so one row of T tokens would cost T^2 in attention where the padded batch costs
B x L^2; rows of the longest length keep attention no dearer than the padded pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rlcore.columns import (
    ATTENTION_MASK,
    IMAGE_COLUMNS,
    INPUT_IDS,
    PIXEL_VALUES,
    POSITION_IDS,
    RESPONSE_MASK,
    RESPONSES,
    ROUTED_EXPERTS,
)


@dataclass(frozen=True)
class Packed:
    """A padded micro-batch's sequences packed into ``[rows, width]``."""

    input_ids: torch.Tensor  # [rows, width], pad tokens after the last sequence of a row
    position_ids: torch.Tensor  # [rows, width], restarting at 0 for each sequence; 0 on padding
    # [B, R] flat index (row * width + column) of the position predicting each response token;
    # past a response's end, the position predicting its last token (a real one: finite)
    predictors: torch.Tensor
    valid: torch.Tensor | None = None  # [rows * width] bool: a real token, not padding
    # [rows * width, layers, k]: the batch's ROUTED_EXPERTS of each real token (-1 on padding)
    routed: torch.Tensor | None = None
    # [B]: the batch's rows in the order their sequences lie in the packed rows, read row by row
    # (the order in which a model meets their image placeholders)
    order: torch.Tensor | None = None
    # [3, rows, width]: a model's 3-D positions (Qwen2-VL's) of the packed tokens, when given
    spatial: torch.Tensor | None = None

    @property
    def width(self) -> int:
        return self.input_ids.shape[1]

    def model_inputs(self) -> dict[str, torch.Tensor]:
        """Keyword arguments of the model's forward: no attention mask, so the positions mark
        where each sequence starts (with ``spatial``, transformers' packed form of 3-D
        positions: ``[4, rows, width]``, the restarting text positions first)."""
        positions = self.position_ids
        if self.spatial is not None:
            positions = torch.cat([positions[None], self.spatial])
        return {
            "input_ids": self.input_ids,
            "position_ids": positions,
            "attention_mask": None,
            "use_cache": False,
        }

    def kept_columns(self) -> torch.Tensor:
        """The sorted columns that predict some response token, in any row."""
        return torch.unique(self.predictors.reshape(-1) % self.width)

    def gather(self, outputs: torch.Tensor, columns: torch.Tensor | None = None) -> torch.Tensor:
        """``[B, R, ...]`` from ``outputs`` ``[rows, C, ...]``: the output of the position that
        predicts each response token. ``columns``: the columns ``outputs`` holds (sorted), when
        not every one (``logits_to_keep``)."""
        rows, cols = self.predictors // self.width, self.predictors % self.width
        if columns is not None:
            where = torch.full((self.width,), -1, dtype=torch.long, device=columns.device)
            where[columns] = torch.arange(len(columns), device=columns.device)
            cols = where[cols]
        return outputs[rows, cols]


def pack(
    batch: Any, one_row: bool = False, pad_id: int = 0, spatial: torch.Tensor | None = None
) -> Packed:
    """``batch``'s sequences (its prompt and response tokens, by ``attention_mask``, with the
    positions of its ``position_ids``, and ``spatial``'s ``[3, B, L]`` 3-D positions where
    given) packed into rows. Every row of ``batch`` has at least one prompt token: the first
    response token's prediction reads the prompt's last position."""
    mask = batch[ATTENTION_MASK].bool()
    response_width = batch[RESPONSES].shape[1]
    prompt_lengths = mask[:, : mask.shape[1] - response_width].sum(-1)
    if bool((prompt_lengths == 0).any()):
        raise ValueError(
            "a row with no prompt token cannot be packed: nothing predicts its first response token"
        )
    lengths = mask.sum(-1)
    starts, rows, width = _layout(lengths.tolist(), one_row)
    device = batch[INPUT_IDS].device
    begin = torch.tensor([row * width + column for row, column in starts], device=device)
    # the flat destination of each real token: its sequence's start + its index in it
    sequence = torch.repeat_interleave(torch.arange(len(lengths), device=device), lengths)
    within = (
        torch.arange(int(lengths.sum()), device=device) - (lengths.cumsum(0) - lengths)[sequence]
    )
    destination = begin[sequence] + within
    input_ids = torch.full((rows * width,), pad_id, dtype=batch[INPUT_IDS].dtype, device=device)
    input_ids[destination] = batch[INPUT_IDS][mask]
    positions = torch.zeros(rows * width, dtype=batch[POSITION_IDS].dtype, device=device)
    positions[destination] = batch[POSITION_IDS][mask]
    # response token j of sequence b is predicted at its (prompt length + j - 1)th token
    ends = batch[RESPONSE_MASK].sum(-1).clamp(min=1)
    j = torch.arange(response_width, device=device).expand(len(lengths), -1)
    j = torch.minimum(j, (ends - 1)[:, None])
    predictors = begin[:, None] + prompt_lengths[:, None] + j - 1
    valid = torch.zeros(rows * width, dtype=torch.bool, device=device)
    valid[destination] = True
    routed = None
    if ROUTED_EXPERTS in batch:
        column = batch[ROUTED_EXPERTS]
        routed = column.new_full((rows * width, *column.shape[2:]), -1)
        routed[destination] = column[mask]
    order = torch.argsort(begin)
    packed_spatial = None
    if spatial is not None:
        packed_spatial = spatial.new_zeros((3, rows * width))
        packed_spatial[:, destination] = spatial[:, mask]
        packed_spatial = packed_spatial.view(3, rows, width)
    return Packed(
        input_ids.view(rows, width),
        positions.view(rows, width),
        predictors,
        valid,
        routed,
        order,
        packed_spatial,
    )


def prompt_copies(batch: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(firsts, copy_of)`` when some of ``batch``'s rows hold the same prompt (the same prompt
    columns of ``input_ids``, ``attention_mask`` and ``position_ids``, and the same images where
    the batch has ``pixel_values``: a group's responses):
    ``firsts`` the row of each distinct prompt, ``copy_of`` ``[B]`` the index into ``firsts``
    of each row's prompt. None when every row's prompt is its own."""
    cut = batch[INPUT_IDS].shape[1] - batch[RESPONSES].shape[1]
    parts = [batch[k][:, :cut] for k in (INPUT_IDS, ATTENTION_MASK, POSITION_IDS)]
    if PIXEL_VALUES in batch:  # the same placeholders with other images: another prompt
        images = [batch[k].flatten(1).float() for k in IMAGE_COLUMNS if k in batch]
        _, image = torch.unique(torch.cat(images, 1), dim=0, return_inverse=True)
        parts.append(image[:, None].to(parts[0].dtype))
    keys = torch.cat(parts, dim=1)
    distinct, copy_of = torch.unique(keys, dim=0, return_inverse=True)
    if len(distinct) == len(keys):
        return None
    firsts = torch.full((len(distinct),), len(keys), dtype=torch.long, device=keys.device)
    firsts.scatter_reduce_(0, copy_of, torch.arange(len(keys), device=keys.device), "amin")
    return firsts, copy_of


def padding_share(
    batch: Any, packed: bool, one_row: bool = False, share_prompts: bool = False
) -> float:
    """The share of the token positions a pass over ``batch`` computes that are padding: of its
    ``[B, P + R]`` columns, of the packed rows, or with ``share_prompts`` (and rows that share
    prompts) of each distinct prompt's columns once and each response's
    (``shared_prompt_logits``: its last token's column is not computed)."""
    mask = batch[ATTENTION_MASK]
    copies = prompt_copies(batch) if share_prompts else None
    if copies is not None:
        cut = mask.shape[1] - batch[RESPONSES].shape[1]
        prompts, responses = mask[copies[0], :cut], mask[:, cut:-1]
        real = int(prompts.sum()) + int(responses.sum())
        return 1.0 - real / max(1, prompts.numel() + responses.numel())
    real = int(mask.sum())
    if not packed:
        return 1.0 - real / mask.numel()
    _, rows, width = _layout(mask.sum(-1).tolist(), one_row)
    return 1.0 - real / (rows * width)


def _layout(lengths: list[int], one_row: bool) -> tuple[list[tuple[int, int]], int, int]:
    """``(starts, rows, width)``: the (row, column) of each sequence (``_place``) and the packed
    rows' count and width."""
    starts = _place(lengths, one_row)
    width = max(column + lengths[i] for i, (_, column) in enumerate(starts))
    return starts, max(row for row, _ in starts) + 1, width


def _place(lengths: list[int], one_row: bool) -> list[tuple[int, int]]:
    """(row, column) of each sequence: end to end in one row, or first-fit by decreasing length
    into rows as long as the longest."""
    if one_row:
        columns, at = [], 0
        for length in lengths:
            columns.append((0, at))
            at += length
        return columns
    capacity = max(lengths)
    filled: list[int] = []
    starts: list[tuple[int, int]] = [(0, 0)] * len(lengths)
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        row = next((r for r, used in enumerate(filled) if used + lengths[i] <= capacity), None)
        if row is None:
            row = len(filled)
            filled.append(0)
        starts[i] = (row, filled[row])
        filled[row] += lengths[i]
    return starts
