"""Mixture-of-experts models (issue 53): their routers, the rollout's routing record, routing
replay in the training passes, and the routers' load-balancing loss.

transformers' MoE layers (Qwen2-MoE, Qwen3-MoE, Mixtral, OLMoE) each call a top-k router module
on the layer's tokens, flattened to ``[N, hidden]``; it returns ``(router_logits, scores,
indices)``: the logits ``[N, E]`` over the E experts, each token's k chosen experts ``[N, k]``
and their weights ``[N, k]``: the softmax's values at those experts, renormalised to sum to one
where the model's ``norm_topk_prob`` says so (always, for Mixtral). The layers call their routers
in layer order, once per forward call.

Routing replay (verl's ``enable_rollout_routing_replay``, "R3"): the rollout records the experts
each token was routed to in every MoE layer (``recording``, assembled by the rollout into the
batch's ``routed_experts`` column ``[B, P + R, layers, k]``, aligned with ``input_ids``); the
actor's, the reference's and the old log-probs' passes then route each token to those experts
(``Routing``) instead of their routers' own choice, so a token's log-prob is computed through the
experts that sampled it even where the training pass's numerics would flip a near tie. The
weights stay the router's softmax at the replayed experts, so the router's weight still learns
through them and through the load-balancing loss. A row of -1 routes that token by the router's
own choice: padding, and a response's last token, which the rollout never feeds back.

The load-balancing loss is transformers' (Switch Transformer's): over the valid tokens of every
MoE layer together, ``E * sum_e f_e P_e``, ``f_e`` the share of the k choices that went to
expert e and ``P_e`` the mean router probability of e; under replay the choices are the
replayed ones (the experts the tokens went to).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

# the routers whose choice is the softmax's top k (the weights renormalised as ``_renormalises``
# says): replay re-derives the weights at given experts the same way
SOFTMAX_TOP_K = ("Qwen2MoeTopKRouter", "Qwen3MoeTopKRouter", "MixtralTopKRouter", "OlmoeTopKRouter")


def routers(model: Any) -> list[torch.nn.Module]:
    """The model's MoE routers in layer order (empty for a dense model): transformers' top-k
    router modules, whatever wraps the model (peft, data parallel, FSDP)."""
    return [
        m
        for m in model.modules()
        if type(m).__name__.endswith("TopKRouter") and hasattr(m, "top_k") and hasattr(m, "weight")
    ]


def is_moe(model: Any) -> bool:
    return bool(routers(model))


def replay_refusal(model: Any) -> str | None:
    """Why ``model``'s routing cannot be replayed (None when it can): a router that does not
    choose by the softmax's top k."""
    others = sorted({type(r).__name__ for r in routers(model)} - set(SOFTMAX_TOP_K))
    if others:
        return f"routers {', '.join(others)} (replay knows {', '.join(SOFTMAX_TOP_K)})"
    return None


def _renormalises(router: torch.nn.Module) -> tuple[bool, bool]:
    """(whether the top-k weights are renormalised, whether they are cast to the logits' dtype),
    as the router's own forward does."""
    if type(router).__name__ == "MixtralTopKRouter":
        return True, False
    return bool(router.norm_topk_prob), True


@contextlib.contextmanager
def recording(model: Any) -> Iterator[list[list[torch.Tensor]]]:
    """Within it, each router's chosen experts per forward call: ``calls[layer][i]`` ``[N_i, k]``
    (``N_i`` the tokens of the i-th call, in the order the layer flattened them)."""
    layers = routers(model)
    calls: list[list[torch.Tensor]] = [[] for _ in layers]

    def hook(index: int):
        def keep(module: Any, args: Any, output: Any) -> None:
            calls[index].append(output[2].detach())

        return keep

    handles = [r.register_forward_hook(hook(i)) for i, r in enumerate(layers)]
    try:
        yield calls
    finally:
        for handle in handles:
            handle.remove()


def routed_column(
    calls: list[list[torch.Tensor]], shapes: list[tuple[int, int]], rows: int, width: int
) -> torch.Tensor:
    """The ``[rows, width, layers, k]`` int16 record of ``recording``'s calls, call i having
    processed ``shapes[i] = (its rows, its columns)`` tokens: call i's columns laid after call
    i-1's, a call of fewer rows than ``rows`` (a prompt computed once per group) repeated
    ``rows / its rows`` times row by row; -1 past the last call's columns."""
    k = calls[0][0].shape[-1]
    out = torch.full((rows, width, len(calls), k), -1, dtype=torch.int16)
    column = 0
    for i, (call_rows, columns) in enumerate(shapes):
        chosen = torch.stack([layer[i] for layer in calls], dim=1).reshape(
            call_rows, columns, len(calls), k
        )
        out[:, column : column + columns] = chosen.repeat_interleave(rows // call_rows, 0).cpu()
        column += columns
    return out


class Routing:
    """What a training pass does with an MoE model's routers over one or more forward calls
    (``call``): route each token to given experts (replay), and keep the router logits of the
    valid tokens for ``aux_loss``."""

    def __init__(self, model: Any, replay: bool, keep_logits: bool) -> None:
        self.layers = routers(model)
        self.replay, self.keep_logits = replay, keep_logits
        self._logits: list[torch.Tensor] = []  # per call and layer: [valid, E]
        self._chosen: list[torch.Tensor] = []  # the same tokens' experts [valid, k]
        # under replay: the token-layer routings compared (valid tokens with a recorded choice)
        # and those whose recorded experts are not the router's own choice
        self.compared = 0
        self.flipped = 0

    @contextlib.contextmanager
    def call(self, valid: torch.Tensor, chosen: torch.Tensor | None = None) -> Iterator[None]:
        """Around one forward call over ``valid.numel()`` tokens (as the layers flatten them):
        ``valid`` ``[N]`` bool marks the real ones (not padding); ``chosen`` ``[N, layers, k]``
        the experts to route each to (-1: the router's own choice), None to route as the router
        does."""
        valid = valid.reshape(-1).bool()
        for index, router in enumerate(self.layers):
            replay = None if chosen is None else chosen[:, index].to(torch.long)
            router.forward = self._forward(router, replay, valid)  # an instance attribute
        try:
            yield
        finally:
            for router in self.layers:
                del router.forward  # the class's own again

    def _forward(self, router: Any, replay: torch.Tensor | None, valid: torch.Tensor):
        renormalise, cast = _renormalises(router)

        def forward(hidden_states: torch.Tensor) -> tuple[torch.Tensor, ...]:
            hidden = hidden_states.reshape(-1, router.hidden_dim)
            logits = F.linear(hidden, router.weight)
            probs = torch.softmax(logits.float(), dim=-1)
            indices = torch.topk(probs, router.top_k, dim=-1).indices
            if replay is not None:
                given = replay.to(indices.device)
                recorded = valid.to(given.device) & (given >= 0).all(-1)
                own = indices.sort(-1).values != given.sort(-1).values
                self.compared += int(recorded.sum())
                self.flipped += int((own.any(-1) & recorded).sum())
                indices = torch.where(given >= 0, given, indices)
            weights = probs.gather(1, indices)
            if renormalise:
                weights = weights / weights.sum(dim=-1, keepdim=True)
            if cast:
                weights = weights.to(logits.dtype)
            if self.keep_logits and torch.is_grad_enabled():
                keep = valid.to(logits.device)
                self._logits.append(logits[keep])
                self._chosen.append(indices[keep])
            return logits, weights, indices

        return forward

    def aux_loss(self) -> torch.Tensor | None:
        """The load-balancing loss over every call's valid tokens and every layer (None when no
        logits were kept: a dense model, or no pass with gradients)."""
        if not self._logits:
            return None
        logits = torch.cat(self._logits)
        experts = logits.shape[-1]
        probs = torch.softmax(logits.float(), dim=-1)
        choices = F.one_hot(torch.cat(self._chosen), experts).float()  # [N, k, E]
        share = choices.mean(0)  # [k, E]: the share of each choice slot going to each expert
        return experts * (share * probs.mean(0)[None]).sum()
