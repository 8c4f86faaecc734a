"""Time the algorithm library at the shapes the runners use; print one JSON line.

    python benchmarks/algorithms.py [--threads N] [--repeats R]

Shapes: reasoning, 256 responses x 512 tokens (the seed's Qwen2.5-0.5B GSM8K batch, responses
capped at 512); embodied, 8 envs x 128 steps (the CartPole default). ``gae_vs_per_row`` is the
ratio of a per-sequence GAE loop (the textbook form) to rlcore's batched scan, timed in the same
run, so machine noise largely cancels.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch

from rlcore.algorithms import agg_loss, compute_gae, get_advantage_fn, policy_loss, value_loss


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return 1000 * statistics.median(samples)


def per_row_gae(rewards: torch.Tensor, values: torch.Tensor, gamma: float, lam: float):
    """The textbook GAE, one sequence at a time: the baseline the batched scan is compared to."""
    out = torch.zeros_like(rewards)
    for b in range(rewards.shape[0]):
        gae, next_value = 0.0, 0.0
        for t in reversed(range(rewards.shape[1])):
            delta = rewards[b, t] + gamma * next_value - values[b, t]
            gae = delta + gamma * lam * gae
            out[b, t] = gae
            next_value = values[b, t]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)

    results: dict[str, float | int | str] = {"threads": args.threads, "torch": torch.__version__}
    for label, (b, t) in {"reasoning_256x512": (256, 512), "embodied_8x128": (8, 128)}.items():
        r = torch.randn(b, t, generator=gen)
        v = torch.randn(b, t, generator=gen)
        lengths = torch.randint(t // 4, t + 1, (b,), generator=gen)
        mask = (torch.arange(t)[None] < lengths[:, None]).float()
        old = torch.randn(b, t, generator=gen) * 0.1
        new = old + torch.randn(b, t, generator=gen) * 0.05
        adv = torch.randn(b, t, generator=gen)
        index = torch.arange(b) // 8

        results[f"{label}_gae_ms"] = median_ms(
            lambda r=r, m=mask, v=v: compute_gae(r, m, values=v, gamma=0.99, lam=0.95),
            args.repeats,
        )
        results[f"{label}_grpo_ms"] = median_ms(
            lambda r=r, m=mask, i=index: get_advantage_fn("grpo")(r, m, index=i), args.repeats
        )
        results[f"{label}_policy_loss_ms"] = median_ms(
            lambda o=old, n=new, a=adv, m=mask: policy_loss(o, n, a, m, clip_ratio_c=3.0),
            args.repeats,
        )
        results[f"{label}_value_loss_ms"] = median_ms(
            lambda v=v, r=r, o=old, m=mask: value_loss(v, r, o, m, value_clip=0.2),
            args.repeats,
        )
        results[f"{label}_agg_seq_mean_token_mean_ms"] = median_ms(
            lambda x=adv, m=mask: agg_loss(x, m, "seq-mean-token-mean"), args.repeats
        )

    r = torch.randn(8, 128, generator=gen)
    v = torch.randn(8, 128, generator=gen)
    ones = torch.ones(8, 128)
    batched = median_ms(lambda: compute_gae(r, ones, values=v, gamma=0.99, lam=0.95), 5)
    per_row = median_ms(lambda: per_row_gae(r, v, 0.99, 0.95), 3)
    results["gae_vs_per_row"] = round(per_row / batched, 1)
    print(json.dumps({k: round(x, 3) if isinstance(x, float) else x for k, x in results.items()}))


if __name__ == "__main__":
    main()
