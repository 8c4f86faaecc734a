"""When does asynchronous training pay on a GPU cluster? A small simulation of the two stages
from stage times and a long-tailed response-length distribution (docs/async.md uses it).

    python benchmarks/async_simulation.py [--gen-share 0.23 0.5 0.7] [--sigma 0 0.5 1 1.5]
        [--staleness 1] [--latency-share 0.5] [--iterations 400] [--batch 512]
        [--max-len 8192] [--seed 0]

Model, per iteration of ``--batch`` responses with lengths ``L_i ~ lognormal(log 512, sigma)``
capped at ``--max-len``:

- generation decodes the batch in lockstep: a share ``rho`` (``--latency-share``) of its time
  is the per-token latency of the longest response, which more GPUs do not shorten, the rest
  throughput-bound, divided among the generating GPUs:
  ``gen(f) = a * (rho * max_i L_i + (1 - rho) * mean_i L_i / f)`` on a share f of the GPUs;
- training (log-probs, values, updates) costs per token: ``train = b * sum_i L_i``;
- ``a`` and ``b`` are set so that with ``sigma = 0`` generation is ``--gen-share`` of a
  synchronous iteration (this repository's CPU job measures 0.23; verl reports about half to
  two thirds at 7B scale).

Synchronous (every GPU does both stages in turn): ``sum(gen + train)``. Asynchronous with
staleness bound k: the GPUs split into a generating share f and a training share 1 - f (each
stage's time divided by its share), generation of batch j may start once batch j - 1 - k has
been trained (the bound) and batch j - 1 generated; training of batch j once it is generated
and batch j - 1 trained. The best f (on a 1/16 grid) is reported. One JSON line per (gen
share, sigma): ``speedup`` = synchronous time / asynchronous time over ``--iterations``.
"""

from __future__ import annotations

import argparse
import json
import random


def lengths(rng: random.Random, batch: int, sigma: float, cap: int) -> list[int]:
    return [min(cap, max(1, round(rng.lognormvariate(6.238, sigma)))) for _ in range(batch)]


def generation(batch: list[int], a: float, rho: float, f: float) -> float:
    return a * (rho * max(batch) + (1 - rho) * sum(batch) / len(batch) / f)


def simulate(batches: list[list[int]], a: float, b: float, rho: float, f: float, k: int) -> float:
    """Seconds for the asynchronous pipeline to train every batch (see the module docstring)."""
    gen_done: list[float] = []
    train_done: list[float] = []
    for j, batch in enumerate(batches):
        may_start = max(gen_done[j - 1] if j else 0.0, train_done[j - 1 - k] if j > k else 0.0)
        gen_done.append(may_start + generation(batch, a, rho, f))
        start = max(gen_done[j], train_done[j - 1] if j else 0.0)
        train_done.append(start + b * sum(batch) / (1 - f))
    return train_done[-1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gen-share", type=float, nargs="+", default=[0.23, 0.5, 0.7])
    parser.add_argument("--sigma", type=float, nargs="+", default=[0.0, 0.5, 1.0, 1.5])
    parser.add_argument("--staleness", type=int, default=1)
    parser.add_argument("--latency-share", type=float, default=0.5)
    parser.add_argument("--iterations", type=int, default=400)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--max-len", type=int, default=8192)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for share in args.gen_share:
        for sigma in args.sigma:
            rng = random.Random(args.seed)
            batches = [
                lengths(rng, args.batch, sigma, args.max_len) for _ in range(args.iterations)
            ]
            # sigma = 0: every response 512 tokens; a and b give generation `share` of it
            a, b = share / 512, (1 - share) / (512 * args.batch)
            rho = args.latency_share
            gen_s = sum(generation(x, a, rho, 1.0) for x in batches)
            sync_s = gen_s + sum(b * sum(x) for x in batches)
            best_f, best_s = min(
                (
                    (f / 16, simulate(batches, a, b, rho, f / 16, args.staleness))
                    for f in range(1, 16)
                ),
                key=lambda pair: pair[1],
            )
            line = {
                "gen_share": share,
                "sigma": sigma,
                "staleness": args.staleness,
                "latency_share": rho,
                "generation_share_of_sync": round(gen_s / sync_s, 3),
                "best_generating_gpus": best_f,
                "speedup": round(sync_s / best_s, 3),
            }
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
