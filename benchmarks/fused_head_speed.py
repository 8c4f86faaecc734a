"""The fused log-probs' elementwise work, eager against compiled (``TokenStats.compiled``, on
under ``actor.use_torch_compile``): one update's forward and backward through the fused head,
the two alternated, one JSON line.

    python benchmarks/fused_head_speed.py [--positions 4096] [--hidden 64] [--vocab 151936]

Each chunk's softmax, entropy and their gradient read and write its ``[chunk, V]`` float32
logits about a dozen times in eager mode; compiled, a few fused kernels do it. A small
``--hidden`` keeps the head's matmuls cheap, so what is timed is that elementwise work, the part
the profile of the 0.5B model's actor update on an H200 found to be about half of its GPU time
(benchmarks/gpu_check.py ``update_profile``). On a CPU, inductor's C++ kernels stand in for its
Triton ones: the passes saved are the same, the GPU's figure is still to be measured there.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from rlcore.models.fused_head import TokenStats, fused_log_probs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--positions", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=151936)  # Qwen2.5's
    parser.add_argument("--chunk", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    dtype = torch.bfloat16  # the GPU recipe's passes
    hidden = torch.randn(args.positions, args.hidden, generator=gen).to(dtype).requires_grad_()
    weight = (torch.randn(args.vocab, args.hidden, generator=gen) * 0.1).to(dtype)
    weight.requires_grad_()
    tokens = torch.randint(0, args.vocab, (args.positions,), generator=gen)

    def step(compiled: bool) -> float:
        stats = TokenStats(0.9, args.chunk, True, compiled=compiled)
        start = time.perf_counter()
        logp, entropy, _ = fused_log_probs(hidden, weight, None, tokens, stats)
        (logp.sum() + 0.01 * entropy.sum()).backward()
        seconds = time.perf_counter() - start
        hidden.grad = weight.grad = None
        return seconds

    start = time.perf_counter()
    step(True)  # compiles (forward and backward math)
    compile_s = time.perf_counter() - start
    step(False)
    seconds: dict[str, list[float]] = {"eager": [], "compiled": []}
    for _ in range(args.repeats):
        for name in seconds:
            seconds[name].append(round(step(name == "compiled"), 3))
    best = {name: min(v) for name, v in seconds.items()}
    print(
        json.dumps(
            {
                "benchmark": "fused_head_speed",
                "positions": args.positions,
                "hidden": args.hidden,
                "vocab": args.vocab,
                "chunk": args.chunk,
                "threads": args.threads,
                "first_compiled_call_s": round(compile_s, 1),
                "seconds": seconds,
                "compiled_speedup": round(best["eager"] / best["compiled"], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
