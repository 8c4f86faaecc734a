"""What the log-probs and entropies of one update micro-batch keep for the backward pass, from
the last hidden states through the LM head: the plain pass (logits, then
``log_probs_and_entropy``, whole or chunked) against ``actor.model.use_fused_kernels``
(``fused_log_probs``). One JSON line per variant: the bytes of the tensors autograd saves (each
storage once) and the largest of them, counted with ``saved_tensors_hooks`` on the meta device
(shapes only: nothing is allocated, so the 0.5B model's vocabulary fits any machine).

    python benchmarks/fused_logits_memory.py [--positions 4096] [--hidden 896] [--vocab 151936]

The defaults are Qwen2.5-0.5B's head (bf16) at 4096 response positions (micro-batch 8 x 512).
Saved tensors are a floor of the peak, not the peak: each chunk's temporaries come on top
(fused: about four ``[chunk, V]`` float32 tensors in the backward pass).
"""

from __future__ import annotations

import argparse
import json

import torch

from rlcore.models.forward import log_probs_and_entropy
from rlcore.models.fused_head import TokenStats, fused_log_probs


def saved(fn) -> tuple[int, int]:
    """(bytes, largest bytes) of the tensors saved for backward while ``fn()`` runs."""
    seen: dict[tuple, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        key = (id(t.untyped_storage()), t.untyped_storage().nbytes())
        seen[key] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values()), max(seen.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--positions", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=896)
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--chunk", type=int, default=2048, help="positions a chunk")
    args = parser.parse_args()
    n, h, v = args.positions, args.hidden, args.vocab
    meta = {"device": "meta", "dtype": torch.bfloat16}
    hidden = torch.empty(n, h, **meta, requires_grad=True)
    weight = torch.empty(v, h, **meta, requires_grad=True)
    tokens = torch.zeros(n, dtype=torch.long, device="meta")

    def plain(chunk: int | None, checkpoint: bool):
        def run():
            logits = hidden @ weight.T
            return log_probs_and_entropy(logits, tokens, 0.9, chunk, checkpoint)

        return run

    variants = {
        "plain": plain(None, False),
        "chunked": plain(args.chunk, False),
        "chunked+checkpointed": plain(args.chunk, True),
        "fused": lambda: fused_log_probs(hidden, weight, None, tokens, TokenStats(0.9, args.chunk)),
    }
    for name, run in variants.items():
        total, largest = saved(run)
        row = {
            "variant": name,
            "positions": n,
            "vocab": v,
            "saved_gib": round(total / 2**30, 3),
            "largest_saved_gib": round(largest / 2**30, 3),
        }
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
