"""The ``hf`` engine's decode loop over a static key-value cache (``rollout.hf.static_cache``).

transformers' ``generate`` spends a decode step of a small model mostly in Python and kernel
launches (on an H200, 0.5B, 256 rows: about 33 ms a step where the GPU's work is under 2 ms), and
synchronises with the host every token for its stop check. Here the loop is rlcore's own:

- one prefill of the (left-padded) prompts into a ``StaticCache`` of a fixed length;
- then one decode step per token: the model on the last sampled tokens, with positions and a 4D
  attention mask held in fixed tensors (so transformers builds no mask and reads no length on
  the host), its last logits copied into a fixed float32 buffer. On CUDA
  (``rollout.hf.cuda_graph``) that step is captured once in a CUDA graph and replayed per
  token; elsewhere the same step runs as written;
- sampling (temperature, then top-k, then top-p, as transformers' warpers apply them), the
  recorded log-probs and the end-of-sequence bookkeeping on the device; the host asks whether
  every row has ended once every ``CHECK_EVERY`` tokens only.

Buckets: a call's rows are rounded up to a multiple of ``rollout.hf.batch_bucket`` (the extra
rows repeat the first and are dropped) and the cache's length to a multiple of
``rollout.hf.length_bucket``; each bucket keeps its cache, its fixed tensors and its graph, so a
validation batch or a shorter prompt reuses or adds a bucket instead of recapturing, and at most
``rollout.hf.max_buckets`` are kept (the least recently used is dropped). A weight sync copies
into the model's tensors in place (rlcore/scheduler/weight_buckets.py), and an optimiser steps
them in place: a captured graph reads them where they are, so it stays valid.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from rlcore.models.forward import cache_inputs

CHECK_EVERY = 16  # decode steps between two host checks of whether every row has ended


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


@dataclass
class Sampling:
    """How a call samples: ``greedy`` (argmax), else temperature, top-k (0: none), top-p."""

    greedy: bool
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0


def scaled(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``logits / temperature`` (at 1 the logits themselves, without a copy of their size)."""
    return logits if temperature == 1.0 else logits / temperature


def warp(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """``logits`` ``[B, V]`` (float32) as transformers' temperature, top-k and top-p warpers
    leave them, in that order (see ``filtered``)."""
    return filtered(scaled(logits, sampling.temperature), sampling)


def filtered(scores: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """Scores at the temperature with the tokens outside top-k, and outside the smallest set
    whose probability reaches top-p (the most likely token always kept), at -inf."""
    if sampling.top_k > 0:
        k = min(sampling.top_k, scores.shape[-1])
        kth = torch.topk(scores, k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if sampling.top_p < 1.0:
        ordered, order = torch.sort(scores, dim=-1)
        mass = ordered.softmax(-1).cumsum(-1)
        drop = mass <= 1 - sampling.top_p
        drop[..., -1:] = False
        scores = scores.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return scores


def check_full_attention(config: Any, name: str) -> None:
    """Refuse the model ``name`` (its transformers ``config``) when some of its layers attend
    otherwise than to every earlier position (sliding windows, chunked attention): the static
    decode loop builds the full attention mask only. The dry run checks the model folder's
    config with it, the engine its loaded model."""
    types = getattr(config.get_text_config(decoder=True), "layer_types", None) or []
    if any(t != "full_attention" for t in types):
        from rlcore.config.errors import ConfigError

        raise ConfigError(
            f"rollout.hf.static_cache: {name} has layers of kinds {sorted(set(types))}; the "
            "static decode loop builds the full attention mask only; set "
            "rollout.hf.static_cache=false for this model"
        )


def grouped_query_decode(original: Callable) -> Callable:
    """``original`` (an attention function of transformers' ``AttentionInterface``) computing a
    one-token step of grouped-query attention without copying the keys and values per query
    head: the query heads that share a key/value head become the query rows of one attention
    over that head's keys (the same sums). transformers 5.17's ``sdpa`` repeats the keys and
    values for each query head whenever a mask is given (7 copies of the whole cache per layer
    and step for Qwen2.5-0.5B's 14 query and 2 key/value heads); 5.24 packs as here. Anything
    else (a longer query, no shared heads, a per-head mask, extra biases) goes to
    ``original``."""

    def attend(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        groups = getattr(module, "num_key_value_groups", 1)
        plain = (
            query.shape[2] != 1
            or groups == 1
            or attention_mask is None
            or attention_mask.dim() != 4
            or attention_mask.shape[1] != 1
            or any(kwargs.get(k) is not None for k in ("position_bias", "softcap", "sinks"))
            or getattr(module, "sliding_window", None)
        )
        if plain:
            return original(
                module,
                query,
                key,
                value,
                attention_mask,
                dropout=dropout,
                scaling=scaling,
                **kwargs,
            )
        rows, heads, _, width = query.shape
        packed = query.reshape(rows, heads // groups, groups, width)
        mask = attention_mask[..., : key.shape[-2]]
        out = torch.nn.functional.scaled_dot_product_attention(
            packed, key, value, attn_mask=mask, scale=scaling
        )
        return out.reshape(rows, heads, 1, width).transpose(1, 2).contiguous(), None

    return attend


@contextmanager
def decode_attention(config: Any) -> Iterator[None]:
    """Within it, the attention function registered under ``config``'s implementation is
    ``grouped_query_decode`` of itself (transformers looks it up by name at each call; a
    captured graph keeps what it found at capture). ``eager``, not registered, is left as is."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    name = getattr(config, "_attn_implementation", None)
    if name not in ALL_ATTENTION_FUNCTIONS:
        yield
        return
    original = ALL_ATTENTION_FUNCTIONS[name]
    ALL_ATTENTION_FUNCTIONS[name] = grouped_query_decode(original)  # (this instance's only)
    try:
        yield
    finally:
        ALL_ATTENTION_FUNCTIONS[name] = original


class _Bucket:
    """One (rows, cache length) shape: its cache, the decode step's fixed inputs and output,
    and its captured graph once taken."""

    def __init__(self, config: Any, rows: int, length: int, device: torch.device) -> None:
        from transformers import StaticCache

        self.rows, self.length = rows, length
        self.cache = StaticCache(config=config, max_cache_len=length)
        self.tokens = torch.zeros(rows, 1, dtype=torch.long, device=device)
        self.positions = torch.zeros(rows, 1, dtype=torch.long, device=device)
        self.mask = torch.zeros(rows, 1, 1, length, dtype=torch.bool, device=device)
        self.logits: torch.Tensor | None = None  # [rows, V] float32, set by the first step
        self.graph: Any = None

    def rewind(self) -> None:
        """Back to an empty cache (its tensors kept: a graph reads them where they are)."""
        for layer in self.cache.layers:
            if getattr(layer, "is_initialized", False):
                layer.cumulative_length.zero_()

    def lengths(self) -> list[torch.Tensor]:
        return [layer.cumulative_length.clone() for layer in self.cache.layers]

    def set_lengths(self, saved: list[torch.Tensor]) -> None:
        for layer, value in zip(self.cache.layers, saved, strict=True):
            layer.cumulative_length.copy_(value)


class StaticDecoder:
    """Generates for the ``hf`` engine as the module docstring says. ``model``: a transformers
    causal LM (under a peft wrapper or not); ``eos_ids``: the tokens that end a row."""

    def __init__(
        self,
        model: Any,
        eos_ids: list[int],
        pad_id: int,
        device: torch.device,
        *,
        batch_bucket: int,
        length_bucket: int,
        max_buckets: int,
        cuda_graph: bool,
        compile_backend: str | None = None,
    ) -> None:
        self.model = getattr(model, "module", model)  # (DistributedDataParallel)
        self.config = self._text_config()
        self.device, self.pad_id = device, pad_id
        self.eos = torch.as_tensor(eos_ids, device=device)
        self.batch_bucket, self.length_bucket = batch_bucket, length_bucket
        self.max_buckets = max_buckets
        self.graphs = cuda_graph and device.type == "cuda"
        self.buckets: OrderedDict[tuple[int, int], _Bucket] = OrderedDict()
        self.pool: Any = None  # the graphs' shared memory pool
        self.captures = 0  # graphs captured so far (what the tests and benchmarks read)
        # the model's step, compiled whole (rollout.hf.compile: inductor) or as it is
        self.model_step = (
            torch.compile(self._model_step, backend=compile_backend, fullgraph=True, dynamic=False)
            if compile_backend
            else self._model_step
        )

    def _text_config(self) -> Any:
        from rlcore.models.forward import inner_model

        config = inner_model(self.model).config
        check_full_attention(config, type(inner_model(self.model)).__name__)
        return config

    def release(self) -> None:
        """Drop every bucket (its cache, buffers and graph) and the graphs' memory pool: the
        device memory goes back to torch's allocator for others to use until the next call."""
        self.buckets.clear()
        self.pool = None

    def bucket(self, rows: int, width: int, new_tokens: int) -> _Bucket:
        """The bucket of a call of ``rows`` prompts ``width`` wide generating up to
        ``new_tokens`` each (made, or reused and marked most recently used)."""
        shape = (
            round_up(rows, self.batch_bucket),
            round_up(width + new_tokens, self.length_bucket),
        )
        if shape in self.buckets:
            self.buckets.move_to_end(shape)
            return self.buckets[shape]
        while len(self.buckets) >= self.max_buckets:
            self.buckets.popitem(last=False)
        self.buckets[shape] = _Bucket(self.config, *shape, self.device)
        return self.buckets[shape]

    @torch.no_grad()
    def generate(
        self,
        ids: torch.Tensor,
        mask: torch.Tensor,
        new_tokens: int,
        sampling: Sampling,
        log_probs: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(responses [B, n], log-probs [B, n] or None)``, n <= ``new_tokens`` (fewer when
        every row ended sooner): each row's tokens up to its first end-of-sequence token, then
        padding; each sampled token's log-prob at the temperature over the whole vocabulary
        (top-k / top-p not applied: what the actor computes), 0 after the end."""
        from rlcore.data.sequences import position_ids

        rows, width = ids.shape
        b = self.bucket(rows, width, new_tokens)
        ids, mask = self._fill_rows(ids.to(self.device), b.rows), self._fill_rows(mask, b.rows)
        mask = mask.to(self.device)
        b.rewind()
        logits = self._call(ids, mask, position_ids(mask), b.cache).logits[:, -1].float()
        b.mask.zero_()
        b.mask[:, 0, 0, :width] = mask.bool()
        b.positions.copy_(mask.sum(-1, keepdim=True))  # the first new token's position
        ended = torch.zeros(b.rows, dtype=torch.bool, device=self.device)
        tokens, logps = [], []
        for step in range(new_tokens):
            if step:
                b.tokens.copy_(tokens[-1][:, None])
                b.mask[:, 0, 0, width + step - 1] = True
                self._step(b)
                b.positions += 1
                logits = b.logits
            scores = scaled(logits, sampling.temperature)  # (once a step, for both)
            chosen = logits.argmax(-1) if sampling.greedy else self._sample(scores, sampling)
            if log_probs:
                logp = scores.log_softmax(-1).gather(-1, chosen[:, None]).squeeze(-1)
                logps.append(logp.masked_fill(ended, 0.0))
            chosen = chosen.masked_fill(ended, self.pad_id)
            tokens.append(chosen)
            ended |= torch.isin(chosen, self.eos)
            if (step + 1) % CHECK_EVERY == 0 and bool(ended[:rows].all()):
                break
        responses = torch.stack(tokens, 1)[:rows]
        return responses, (torch.stack(logps, 1)[:rows] if log_probs else None)

    @staticmethod
    def _fill_rows(tensor: torch.Tensor, rows: int) -> torch.Tensor:
        """``tensor`` with rows added up to ``rows``, each a copy of the first."""
        extra = rows - len(tensor)
        return torch.cat([tensor, tensor[:1].expand(extra, -1)]) if extra else tensor

    @staticmethod
    def _sample(scores: torch.Tensor, sampling: Sampling) -> torch.Tensor:
        """A token per row drawn from ``scores`` (at the temperature) after top-k / top-p."""
        probs = filtered(scores, sampling).softmax(-1)
        return torch.multinomial(probs, 1).squeeze(-1)

    def _forward(self, b: _Bucket) -> None:
        """The decode step: the model on ``b.tokens`` at ``b.positions`` under ``b.mask``, its
        next-token logits into ``b.logits`` (the cache takes the tokens' keys and values)."""
        with decode_attention(self.config):
            out = self.model_step(b)
        if b.logits is None:
            b.logits = out.logits[:, -1].float()
        else:
            b.logits.copy_(out.logits[:, -1])

    def _model_step(self, b: _Bucket) -> Any:
        return self._call(b.tokens, b.mask, b.positions, b.cache)

    def _call(self, ids: Any, mask: Any, positions: Any, cache: Any) -> Any:
        """The model on ``ids`` into ``cache``, its last position's logits kept (the prefill
        with a 2D mask, a decode step with the bucket's 4D one)."""
        return self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **cache_inputs(self.model, cache),
        )

    def _step(self, b: _Bucket) -> None:
        if not self.graphs:
            self._forward(b)
            return
        if b.graph is None:
            self._capture(b)
        b.graph.replay()

    def _capture(self, b: _Bucket) -> None:
        """Capture ``b``'s decode step. It first runs twice on a side stream (CUDA's libraries
        set up their workspaces outside a capture); what those runs wrote into the cache is
        undone by putting its lengths back (the columns they wrote are written again by the
        real step), and the capture itself runs nothing."""
        saved = b.lengths()
        stream = torch.cuda.Stream(device=self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(2):
                self._forward(b)
                b.set_lengths(saved)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            self._forward(b)
        b.set_lengths(saved)
        b.graph = graph
        self.captures += 1
