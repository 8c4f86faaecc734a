"""The sampled tokens' log-probs and entropies straight from the last hidden states and the LM
head, a chunk of positions at a time, forward and backward (``actor.model.use_fused_kernels``,
verl's key): no float32 logits of the whole vocabulary for every position exist at once, nor
are any kept for the backward pass, which computes each chunk's logits again from the hidden
states and the head's weight.

``fused_head`` runs it inside the model's forward, in place of its LM head, so it runs wherever
the head's weight is whole (under FSDP2 the root module gathers the tied embedding and head only
for its own forward and backward) and through every wrapper (DDP, FSDP2, peft).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from rlcore.models import compiling

KEY = "actor.model.use_fused_kernels"


@dataclass(frozen=True)
class TokenStats:
    """What a fused pass computes per position: the log-prob of its token at ``temperature``,
    the entropy (``entropy``) and the sum of the squared probabilities (``sum_pi_squared``,
    forward only), ``chunk_size`` positions at a time (None: all at once); ``compiled``: each
    chunk's elementwise work on its logits (softmax, entropy, their gradient) compiled with
    torch.compile, which fuses a dozen passes over the ``[chunk, V]`` float32 logits into a few
    (``actor.use_torch_compile``)."""

    temperature: float
    chunk_size: int | None = None
    entropy: bool = True
    sum_pi_squared: bool = False
    compiled: bool = False

    @property
    def width(self) -> int:
        """Outputs a position: the log-prob, then the entropy and the sum if computed."""
        return 1 + self.entropy + self.sum_pi_squared


def fused_log_probs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    tokens: torch.Tensor,
    stats: TokenStats,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """``(log_probs, entropy, sum_pi_squared)`` float32 ``[...]`` of the logits
    ``(hidden @ weight.T + bias).float() / temperature`` at ``tokens`` ``[...]``, ``hidden``
    ``[..., H]``, ``weight`` ``[V, H]`` (None where ``stats`` does not ask). The same values and
    gradients as computing the logits, ``log_softmax`` and the entropy in one piece."""
    shape = tokens.shape
    flat, picked = hidden.reshape(-1, hidden.shape[-1]), tokens.reshape(-1)
    grads = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (hidden, weight, bias)
    )
    if grads and stats.sum_pi_squared:
        raise ValueError("sum_pi_squared is forward only: compute it under torch.no_grad()")
    if grads:
        logp, entropy = _FusedLogProbs.apply(flat, weight, bias, picked, stats)
        sums = None
    else:
        logp, entropy, sums, _ = _forward(flat, weight, bias, picked, stats)
    return tuple(None if t is None else t.reshape(shape) for t in (logp, entropy, sums))


def _exact(dtype: torch.dtype) -> torch.dtype:
    """float32, or float64 for float64 inputs (a gradient check)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _forward(hidden, weight, bias, tokens, stats: TokenStats):
    """Per position: log-prob, entropy and sum of squares (None unless asked), logsumexp."""
    n, step = hidden.shape[0], stats.chunk_size or max(1, hidden.shape[0])
    logp = hidden.new_empty(n, dtype=_exact(hidden.dtype))
    lse = torch.empty_like(logp)
    entropy = torch.empty_like(logp) if stats.entropy else None
    sums = torch.empty_like(logp) if stats.sum_pi_squared else None
    math = _maybe_compiled(_chunk_stats, stats)
    for start in range(0, n, step):
        part = slice(start, start + step)
        z = _chunk_matmul(hidden[part], weight, bias)
        logp[part], lse[part], chunk_entropy, chunk_sums = math(
            z, tokens[part], stats.temperature, stats.entropy, stats.sum_pi_squared
        )
        if entropy is not None:
            entropy[part] = chunk_entropy
        if sums is not None:
            sums[part] = chunk_sums
    return logp, entropy, sums, lse


def _chunk_matmul(h, weight, bias) -> torch.Tensor:
    """One chunk's logits in the head's dtype (the matmul accumulates in float32)."""
    return h @ weight.T if bias is None else torch.addmm(bias, h, weight.T)


def _chunk_stats(z, tokens, temperature: float, entropy: bool, sums: bool):
    """From one chunk's logits ``z`` ``[c, V]``: the log-prob of each position's token, the
    logsumexp, and the entropy and sum of squared probabilities (None unless asked), float32."""
    z = z.to(_exact(z.dtype))
    if temperature != 1.0:
        z = z.div_(temperature)
    lse = torch.logsumexp(z, dim=-1)
    logp = z.gather(-1, tokens[:, None]).squeeze(-1) - lse
    if not (entropy or sums):
        return logp, lse, None, None
    logp_all = z.sub_(lse[:, None])  # (in place: z is not read again)
    p = logp_all.exp()
    # -sum p log p, not lse - sum p z: no difference of two large numbers
    ent = -(p * logp_all).sum(-1) if entropy else None
    squares = p.square_().sum(-1) if sums else None
    return logp, lse, ent, squares


def _chunk_grad(z, tokens, lse, entropy, grad_logp, grad_entropy, temperature: float, bias: bool):
    """The gradient of a chunk's log-probs and entropies with respect to its logits ``z``, in
    ``z``'s dtype for the matmuls, and its sum over positions in float32 for the bias (when
    ``bias``)."""
    logp_all = z.to(_exact(z.dtype))
    if temperature != 1.0:
        logp_all = logp_all.div_(temperature)
    logp_all = logp_all.sub_(lse[:, None])
    p = logp_all.exp()
    # d log p_t / dz = onehot(t) - p; d H / dz = -p (log p - E_p[log p]), E_p[log p] = -H
    if grad_logp is None:
        grad = torch.zeros_like(p)
    else:
        grad = p * -grad_logp[:, None]
        grad.scatter_add_(-1, tokens[:, None], grad_logp[:, None])
    if grad_entropy is not None:
        centred = logp_all.add_(entropy[:, None])
        grad -= centred.mul_(p).mul_(grad_entropy[:, None])
    if temperature != 1.0:
        grad /= temperature
    return grad.to(z.dtype), (grad.sum(0) if bias else None)


def _maybe_compiled(fn: Callable, stats: TokenStats) -> Callable:
    if not stats.compiled:
        return fn
    return _compile(fn, compiling.COMPILE_BACKEND)


@functools.cache
def _compile(fn: Callable, backend: Any) -> Callable:
    """``fn`` compiled once per backend (shapes dynamic: a last, shorter chunk or another pass's
    positions do not recompile)."""
    compiling.room_for_every_pass()
    return torch.compile(fn, backend=backend, dynamic=True)


class _FusedLogProbs(torch.autograd.Function):
    """Saves the hidden states, the weight, the tokens and ``[N]`` vectors, never ``[N, V]``."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, tokens, stats: TokenStats):
        logp, entropy, _, lse = _forward(hidden, weight, bias, tokens, stats)
        ctx.stats = stats
        ctx.save_for_backward(hidden, weight, bias, tokens, lse, entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp, grad_entropy):
        hidden, weight, bias, tokens, lse, entropy = ctx.saved_tensors
        stats = ctx.stats
        want_h, want_w, want_b = ctx.needs_input_grad[:3]
        grad_h = torch.empty_like(hidden) if want_h else None
        exact = _exact(hidden.dtype)
        grad_w = torch.zeros_like(weight, dtype=exact) if want_w else None
        grad_b = torch.zeros_like(bias, dtype=exact) if want_b else None
        n, step = hidden.shape[0], stats.chunk_size or max(1, hidden.shape[0])
        math = _maybe_compiled(_chunk_grad, stats)
        for start in range(0, n, step):
            part = slice(start, start + step)
            h = hidden[part]
            low, bias_sum = math(
                _chunk_matmul(h, weight, bias),
                tokens[part],
                lse[part],
                None if entropy is None else entropy[part],
                None if grad_logp is None else grad_logp[part],
                None if grad_entropy is None else grad_entropy[part],
                stats.temperature,
                want_b,
            )
            if want_h:  # (``low``: the dtype of the matmul of ``h``, so of ``hidden``)
                grad_h[part] = low @ weight
            if want_w:
                grad_w += (low.T @ h).to(exact)
            if want_b:
                grad_b += bias_sum
        cast = [None if g is None else g.to(t.dtype) for g, t in ((grad_w, weight), (grad_b, bias))]
        return grad_h, *cast, None, None


class HeadTargets:
    """What the fused head computes in the next forward pass: ``pick`` takes the hidden states
    transformers passes its LM head (after ``logits_to_keep``) to ``[..., H]``, the positions
    that predict ``tokens`` ``[...]``; the model's ``logits`` are then ``[..., stats.width]``
    (log-prob, entropy, sum of squares)."""

    def __init__(self, stats: TokenStats) -> None:
        self.stats = stats
        self.pick: Callable[[torch.Tensor], torch.Tensor] | None = None
        self.tokens: torch.Tensor | None = None

    def aim(self, pick: Callable[[torch.Tensor], torch.Tensor], tokens: torch.Tensor) -> None:
        self.pick, self.tokens = pick, tokens

    def run(self, head: torch.nn.Linear, hidden: torch.Tensor) -> torch.Tensor:
        if self.pick is None or self.tokens is None:
            raise RuntimeError("the fused LM head ran with no target tokens set (aim first)")
        picked, tokens = self.pick(hidden), self.tokens
        self.pick = self.tokens = None  # each pass sets its own
        outputs = fused_log_probs(picked, head.weight, head.bias, tokens, self.stats)
        return torch.stack([t for t in outputs if t is not None], dim=-1)


@contextlib.contextmanager
def fused_head(inner: Any, stats: TokenStats) -> Iterator[HeadTargets]:
    """Within the block, the LM head of ``inner`` (the transformers model, under whatever wraps
    it: ``forward.inner_model``) returns the fused ``[..., stats.width]`` outputs of the targets
    ``aim``ed before each pass instead of logits (``check_fused_head`` first)."""
    head = inner.get_output_embeddings()
    targets = HeadTargets(stats)
    head.forward = lambda hidden: targets.run(head, hidden)
    try:
        yield targets
    finally:
        del head.forward  # the class's forward again


def check_fused_head(inner: Any, setting: str = KEY) -> None:
    """Refuse a transformers model ``inner`` (``forward.inner_model``) whose LM head is not a
    plain ``nn.Linear`` (peft adapters on it) or whose forward does anything to the head's
    logits but return them (soft-capping, scaling: Gemma 2, Cohere, Granite)."""
    from rlcore.config.errors import ConfigError

    head = inner.get_output_embeddings()
    name = type(inner).__name__
    if type(head) is not torch.nn.Linear:
        raise ConfigError(
            f"{setting}: {name}'s LM head is a {type(head).__name__}, not a plain "
            "torch.nn.Linear (LoRA adapters on lm_head?); the fused log-probs read its weight "
            "alone: remove lm_head from actor.model.lora.target_modules, or set it false"
        )
    problem = _post_processing(type(inner))
    if problem:
        raise ConfigError(
            f"{setting}: {name}'s forward {problem}, which the fused log-probs (computed in "
            "place of the head's output) would skip; set it false for this model"
        )


def _post_processing(model_type: type) -> str | None:
    """What ``model_type.forward`` does between its LM head and returning the logits, if
    anything: the line that changes them, or that it does not call ``self.lm_head``."""
    try:
        lines = inspect.getsource(model_type.forward).splitlines()
    except (OSError, TypeError):
        return "cannot be read (no source)"
    calls = [i for i, line in enumerate(lines) if "self.lm_head(" in line]
    if len(calls) != 1:
        return "does not call self.lm_head exactly once"
    changes = re.compile(r"^\s*logits\s+[*/+-]?=\s")  # an assignment, not logits=logits,
    for line in lines[calls[0] + 1 :]:
        if changes.search(line):
            return f"changes the logits after its lm_head ({line.strip()!r})"
    return None
