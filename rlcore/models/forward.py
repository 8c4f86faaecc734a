"""Forward passes of transformers models over the reasoning batch: the logits that predict each
response token (padded rows, packed rows, or prompts computed once per group), a value model's
values, the sampled tokens' log-probs, and what those passes ask of the model (its attention
kernel, its key-value cache's keyword, whether it keeps packed sequences apart).

The batch's layout is ``rlcore.data.sequences``'; packing's is ``rlcore.data.packing``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from typing import Any

import torch
import torch.utils.checkpoint

from rlcore.columns import (
    ATTENTION_MASK,
    IMAGE_GRID,
    INPUT_IDS,
    PIXEL_VALUES,
    POSITION_IDS,
    RESPONSES,
    ROUTED_EXPERTS,
)
from rlcore.data.packing import Packed, pack, prompt_copies
from rlcore.models.fused_head import HeadTargets, TokenStats, fused_head
from rlcore.models.moe import Routing


def one_row_kernel(model: Any) -> bool:
    """Whether ``model`` attends with a flash-attention kernel, which reads packed sequences
    from one row only (its variable-length path)."""
    config = getattr(inner_model(model), "config", None)
    return "flash" in str(getattr(config, "_attn_implementation", "") or "")


def inner_model(model: Any) -> Any:
    """The transformers model under a data-parallel or peft wrapper (both pass keyword
    arguments through to it)."""
    model = getattr(model, "module", model)  # DistributedDataParallel
    return model.get_base_model() if hasattr(model, "get_base_model") else model  # peft


def cache_inputs(model: Any, cache: Any) -> dict[str, Any]:
    """``cache`` as the keyword argument of ``model``'s forward and ``generate``: ``cache`` from
    transformers 5.24 on, ``past_key_values`` before (5.24 still takes it, with a warning)."""
    return {_cache_keyword(type(inner_model(model))): cache}


def output_cache(output: Any) -> Any:
    """The key-value cache a forward pass returned (``cache``, or ``past_key_values`` before
    transformers 5.24)."""
    return output["cache"] if "cache" in output else output["past_key_values"]


@functools.cache
def _cache_keyword(model_type: type) -> str:
    takes = inspect.signature(model_type.forward).parameters
    return "cache" if "cache" in takes else "past_key_values"


@torch.no_grad()
def check_packing(model: Any, setting: str = "actor.model.use_remove_padding") -> None:
    """Refuse a ``model`` that does not keep packed sequences apart: two sequences packed in one
    row must give the outputs each gives alone (a model whose attention ignores the positions'
    restarts, or one with no positions, would mix them silently). Every rank of a sharded
    model runs it, with the same inputs."""
    from rlcore.config.errors import ConfigError

    config = inner_model(model).config
    parameter = next(model.parameters())
    generator = torch.Generator().manual_seed(0)
    lengths = (5, 3)
    vocab = config.get_text_config().vocab_size  # (a vision-language model's: its LM's)
    sequences = [torch.randint(0, vocab, (n,), generator=generator) for n in lengths]
    image = getattr(config, "image_token_id", None)
    if image is not None:  # (text alone: no images to give)
        sequences = [s.masked_fill(s == image, 0) for s in sequences]
    positions = torch.cat([torch.arange(n) for n in lengths])
    positions = positions[None]
    if spatial_positions(model):  # (transformers' packed form: the text positions, then 3-D)
        positions = positions[None].expand(4, -1, -1)
    packed = (
        model(
            input_ids=torch.cat(sequences)[None].to(parameter.device),
            position_ids=positions.to(parameter.device),
            attention_mask=None,
            use_cache=False,
        )
        .logits[0]
        .float()
    )
    alone = torch.cat(
        [
            model(input_ids=s[None].to(parameter.device), use_cache=False).logits[0]
            for s in sequences
        ]
    ).float()
    tolerance = 1e-4 if parameter.dtype == torch.float32 else 3e-2
    error = float((packed - alone).abs().max() / alone.abs().max().clamp(min=1.0))
    if not error <= tolerance:
        raise ConfigError(
            f"{setting}: {type(inner_model(model)).__name__} (attention "
            f"{getattr(config, '_attn_implementation', None)}) does not keep packed sequences "
            f"apart: packed outputs differ from each sequence's own by {error:.2e} (relative, "
            f"over {tolerance:g}); set it false for this model"
        )


def _routed(
    routing: Routing | None, valid: torch.Tensor, chosen: torch.Tensor | None
) -> contextlib.AbstractContextManager[None]:
    """Around one forward call of ``valid.numel()`` tokens: ``routing``'s (an MoE model's
    replay and load-balancing logits), with ``chosen`` ``[..., layers, k]`` the batch's recorded
    experts of those tokens where it replays."""
    if routing is None:
        return contextlib.nullcontext()
    if not routing.replay:
        return routing.call(valid)
    if chosen is None:
        raise RuntimeError(f"routing replay: the batch has no {ROUTED_EXPERTS} column")
    return routing.call(valid, chosen.reshape(valid.numel(), *chosen.shape[-2:]))


def _recorded(batch: Any, rows: Any, columns: slice) -> torch.Tensor | None:
    """The batch's recorded experts of those rows and columns, where it has them."""
    return batch[ROUTED_EXPERTS][rows, columns] if ROUTED_EXPERTS in batch else None


def batch_images(batch: Any, rows: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """The image inputs of a vision-language model's call over ``rows`` of ``batch`` (every
    row, in order, when None): ``pixel_values`` ``[images, C, H, W]``, each row's images in
    turn, as the model meets their placeholders in the call's ``input_ids`` read row by row;
    for a grid model (``IMAGE_GRID``), each image's patches in turn ``[patches, D]`` and
    ``image_grid_thw`` ``[images, 3]``. None where the batch has no images."""
    if PIXEL_VALUES not in batch:
        return {}
    pixels = batch[PIXEL_VALUES] if rows is None else batch[PIXEL_VALUES][rows]
    if IMAGE_GRID not in batch:
        return {"pixel_values": pixels.flatten(0, 1)}
    grid = (batch[IMAGE_GRID] if rows is None else batch[IMAGE_GRID][rows]).flatten(0, 1)
    each = zip(pixels.flatten(0, 1), grid.prod(-1).tolist(), strict=True)
    return {"pixel_values": torch.cat([image[:n] for image, n in each]), "image_grid_thw": grid}


def image_inputs(model: Any, batch: Any, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """``_images`` of a call over every row of ``batch`` whose tokens are ``ids``; for a grid
    model also which of them are image placeholders (``mm_token_type_ids``, from which, the
    grids and the attention mask Qwen2-VL computes its 3-D positions)."""
    out = batch_images(batch)
    if IMAGE_GRID in batch:
        token = inner_model(model).config.image_token_id
        out["mm_token_type_ids"] = (ids == token).int()
    return out


def _not_grids(batch: Any, setting: str) -> None:
    """Qwen2-VL's 3-D positions are computed for padded and packed rows, not yet for a prompt
    computed once (the config check refuses ``setting`` with them before the start)."""
    if IMAGE_GRID in batch:
        raise RuntimeError(f"{setting} with a grid model's images (Qwen2-VL's): not built yet")


def spatial_positions(model: Any) -> bool:
    """Whether ``model`` takes 3-D positions (Qwen2-VL's family: its trunk's ``get_rope_index``)."""
    return hasattr(getattr(inner_model(model), "model", None), "get_rope_index")


def _pack(model: Any, batch: Any) -> Packed:
    """``pack`` for ``model``: with 3-D positions, those of each padded row (the model's own
    ``get_rope_index``, from the placeholders, the rows' image grids and the padding) packed
    beside the text positions, as transformers' packed form of them wants."""
    spatial = None
    if spatial_positions(model):
        inner = inner_model(model)
        ids = batch[INPUT_IDS]
        types = (ids == getattr(inner.config, "image_token_id", -1)).int()
        grid = batch[IMAGE_GRID].flatten(0, 1) if IMAGE_GRID in batch else None
        spatial, _ = inner.model.get_rope_index(
            ids, types, image_grid_thw=grid, attention_mask=batch[ATTENTION_MASK]
        )
    return pack(batch, one_row_kernel(model), spatial=spatial)


def check_images(model: Any, batch: Any) -> None:
    """A vision-language model given image placeholders without the images would embed the
    placeholders as text, silently, and a text model given images would ignore them (a critic
    folder of its own, ``critic.model_path``): refused."""
    token = getattr(getattr(inner_model(model), "config", None), "image_token_id", None)
    if token is None and PIXEL_VALUES in batch:
        raise RuntimeError(
            f"{type(inner_model(model)).__name__} is a text model, given prompts with images"
        )
    if token is not None and PIXEL_VALUES not in batch and bool((batch[INPUT_IDS] == token).any()):
        raise RuntimeError(f"the batch's prompts hold image placeholders but no {PIXEL_VALUES}")


def response_logits(
    model: Any,
    batch: Any,
    response_length: int,
    packed: bool = False,
    share_prompts: bool = False,
    head: HeadTargets | None = None,
    routing: Routing | None = None,
) -> torch.Tensor:
    """Logits ``[B, R, V]`` that predict each response token (the position before it). Where the
    model takes ``logits_to_keep`` (transformers' causal LMs), the output projection runs on
    those positions only, not on the prompt's. ``packed``: the sequences packed (``packing``),
    no padding computed; ``share_prompts``: each distinct prompt computed once
    (``shared_prompt_logits``); the same logits. ``head``: the model runs under ``fused_head``,
    and these are its ``[B, R, k]`` outputs for the response tokens instead. ``routing``: an MoE
    model's routers replay the batch's recorded experts and keep their logits, for every call."""
    check_images(model, batch)
    if share_prompts:
        _not_grids(batch, "actor.model.share_group_prompts")
        return shared_prompt_logits(model, batch, head, routing)
    keeps = _keeps_logits(type(inner_model(model)))
    if packed:
        rows = _pack(model, batch)
        columns = rows.kept_columns() if keeps else None
        keep = {"logits_to_keep": columns} if keeps else {}
        if head is not None:
            head.aim(lambda hidden: rows.gather(hidden, columns), batch[RESPONSES])
        with _routed(routing, rows.valid, rows.routed):
            logits = model(**rows.model_inputs(), **batch_images(batch, rows.order), **keep).logits
        return logits if head is not None else rows.gather(logits, columns)
    keep = {"logits_to_keep": response_length + 1} if keeps else {}
    if head is not None:
        head.aim(lambda hidden: hidden[:, -response_length - 1 : -1], batch[RESPONSES])
    with _routed(routing, batch[ATTENTION_MASK], _recorded(batch, slice(None), slice(None))):
        out = model(
            input_ids=batch[INPUT_IDS],
            attention_mask=batch[ATTENTION_MASK],
            position_ids=_positions(batch),
            use_cache=False,
            **image_inputs(model, batch, batch[INPUT_IDS]),
            **keep,
        )
    return out.logits if head is not None else out.logits[:, -response_length - 1 : -1]


def _positions(batch: Any) -> torch.Tensor | None:
    """The padded rows' ``position_ids``; None for a grid model's images, whose 3-D positions
    the model computes (from the placeholders, the grids and the attention mask)."""
    return None if IMAGE_GRID in batch else batch[POSITION_IDS]


def shared_prompt_logits(
    model: Any, batch: Any, head: HeadTargets | None = None, routing: Routing | None = None
) -> torch.Tensor:
    """``response_logits`` of a batch in which rows share prompts (``prompt_copies``; as the
    full rows, when none do), each distinct prompt computed once.

    The distinct prompts pass through the model alone, keeping their keys and values (with
    their gradient: the responses' loss reaches the weights through them as through the full
    sequences); those are gathered for each row, and the responses pass on top of them,
    attending to their prompt as in the full sequence. The prompt pass's last position predicts
    each response's first token. The same logits as the full rows' (to float rounding: the sums
    run in another order), for each distinct prompt's positions once instead of once per
    response."""
    width = batch[RESPONSES].shape[1]
    copies = prompt_copies(batch)
    if copies is None:
        return response_logits(model, batch, width, head=head, routing=routing)
    firsts, copy_of = copies
    cut = batch[INPUT_IDS].shape[1] - width
    prompts = {k: batch[k][firsts, :cut] for k in ("input_ids", "attention_mask", "position_ids")}
    if head is not None:
        head.aim(lambda hidden: hidden[copy_of, -1:], batch[RESPONSES][:, :1])
    with _routed(routing, prompts["attention_mask"], _recorded(batch, firsts, slice(0, cut))):
        out = model(**prompts, **batch_images(batch, firsts), use_cache=True, logits_to_keep=1)
    first = out.logits if head is not None else out.logits[copy_of, -1:]
    if width == 1:
        return first
    cache = output_cache(out)
    cache.batch_select_indices(copy_of)
    if head is not None:
        head.aim(lambda hidden: hidden, batch[RESPONSES][:, 1:])
    responses = batch[ATTENTION_MASK][:, cut:-1]
    with _routed(routing, responses, _recorded(batch, slice(None), slice(cut, -1))):
        rest = model(
            input_ids=batch[INPUT_IDS][:, cut:-1],
            attention_mask=batch[ATTENTION_MASK][:, :-1],
            position_ids=batch[POSITION_IDS][:, cut:-1],
            **cache_inputs(model, cache),
            use_cache=True,
        ).logits
    return torch.cat([first, rest], dim=1)


def response_log_probs(
    model: Any,
    batch: Any,
    stats: TokenStats,
    packed: bool = False,
    share_prompts: bool = False,
    fused: bool = False,
    checkpoint: bool = False,
    routing: Routing | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """``(log_probs, entropy, sum_pi_squared)`` float32 ``[B, R]`` of the response tokens at
    ``stats.temperature`` (None where ``stats`` does not ask). ``fused``: computed inside the
    model's forward from its last hidden states and LM head (``fused_head``), no logits of the
    whole vocabulary kept; else from ``response_logits`` (``log_probs_and_entropy``,
    ``checkpoint`` as there). The same values and gradients. ``routing``: as
    ``response_logits``'."""
    width = batch[RESPONSES].shape[1]
    if fused:
        with fused_head(inner_model(model), stats) as head:
            out = response_logits(model, batch, width, packed, share_prompts, head, routing)
        out = out.unbind(-1)
        entropy = out[1] if stats.entropy else None
        return out[0], entropy, (out[-1] if stats.sum_pi_squared else None)
    logits = response_logits(model, batch, width, packed, share_prompts, routing=routing)
    temperature, sums = stats.temperature, None
    if stats.sum_pi_squared:  # scaled once, for both (the whole softmax is taken anyway)
        logits, temperature = logits / temperature, 1.0
        sums = torch.softmax(logits.float(), -1).square().sum(-1)
    logp, entropy = log_probs_and_entropy(
        logits, batch[RESPONSES], temperature, stats.chunk_size, checkpoint, stats.entropy
    )
    return logp, entropy, sums


def response_values(
    model: Any, batch: Any, packed: bool = False, routing: Routing | None = None
) -> torch.Tensor:
    """A value model's (one output per token) ``[B, R]`` float32 values of the response tokens:
    V(s_t) for token t is read where that token is predicted, as the logits are. ``packed``: as
    in ``response_logits``; ``routing``: an MoE value model's, keeping its router logits (the
    policy's recorded experts are not the value model's to replay)."""
    check_images(model, batch)
    if packed:
        rows = _pack(model, batch)
        with _routed(routing, rows.valid, None):
            out = model(**rows.model_inputs(), **batch_images(batch, rows.order))
            return rows.gather(out.logits[..., 0]).float()
    with _routed(routing, batch[ATTENTION_MASK], None):
        out = model(
            input_ids=batch[INPUT_IDS],
            attention_mask=batch[ATTENTION_MASK],
            position_ids=_positions(batch),
            use_cache=False,
            **image_inputs(model, batch, batch[INPUT_IDS]),
        )
    return out.logits[:, -batch[RESPONSES].shape[1] - 1 : -1, 0].float()


@functools.cache
def _keeps_logits(model_type: type) -> bool:
    return "logits_to_keep" in inspect.signature(model_type.forward).parameters


def log_probs_and_entropy(
    logits: torch.Tensor,
    tokens: torch.Tensor,
    temperature: float,
    chunk_size: int | None = None,
    checkpoint: bool = False,
    entropy: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``token_log_probs`` and ``entropy_from_logits`` of ``logits / temperature`` ``[..., V]``
    at ``tokens`` ``[...]`` (the entropy None unless ``entropy``). ``chunk_size``: computed over
    that many positions at a time (flattened), so the float32 temporaries of one chunk exist at
    once; ``checkpoint``: those temporaries are not kept for the backward pass but recomputed
    from the logits there (``torch.utils.checkpoint``). Either way the same values and
    gradients."""
    from rlcore.algorithms.stats import entropy_from_logits

    def compute(part: torch.Tensor, picked: torch.Tensor) -> tuple[torch.Tensor, ...]:
        # (at temperature 1 the logits themselves: x / 1 is x, without a copy of their size)
        scaled = part if temperature == 1.0 else part / temperature
        logp = token_log_probs(scaled, picked)
        return (logp, entropy_from_logits(scaled.float())) if entropy else (logp,)

    def run(part: torch.Tensor, picked: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if checkpoint and part.requires_grad and torch.is_grad_enabled():
            return torch.utils.checkpoint.checkpoint(compute, part, picked, use_reentrant=False)
        return compute(part, picked)

    if chunk_size is None:
        out = run(logits, tokens)
    else:
        flat, picked = logits.reshape(-1, logits.shape[-1]), tokens.reshape(-1)
        # (split, not slices: its backward joins the chunks' gradients into one tensor, where
        # each slice's would be a zero tensor of the whole size)
        parts = [
            run(part, chosen)
            for part, chosen in zip(flat.split(chunk_size), picked.split(chunk_size), strict=True)
        ]
        out = tuple(torch.cat(column).reshape(tokens.shape) for column in zip(*parts, strict=True))
    return out[0], (out[1] if entropy else None)


def token_log_probs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``log softmax(logits)[token]`` per position, in float32 whatever the model's dtype."""
    logits = logits.float()
    return logits.gather(-1, tokens[..., None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)
