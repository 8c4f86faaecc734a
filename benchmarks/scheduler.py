"""Scheduler overheads on this machine; prints one JSON line.

    python benchmarks/scheduler.py [--params 100e6] [--calls 200]

- ``start_s`` / ``stop_s``: a local Ray start, placement groups and 2 worker processes; and the
  clean shutdown of all of it.
- ``noop_round_trip_ms``: median driver -> worker -> driver time of a method doing nothing, on
  one rank and on both ranks at once (``call_all``).
- ``sync_*_s``: median time to copy a ``--params`` float32 model from actor to rollout, fused
  (in-process), and across processes by the object store, by IPC handles (on CPU slots: named
  shared memory, the stand-in for CUDA IPC on a shared GPU), and by a gloo broadcast.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from rlcore.placement import ComponentRoles, build_plan
from rlcore.runners.profiling import median_seconds
from rlcore.scheduler import Scheduler

ROLES = ComponentRoles("embodied", ("actor", "rollout"))


class Dense:
    """A component holding ``params`` float32 weights in square layers of width 4096."""

    def __init__(self, ctx, params: float, seed: int):
        torch.manual_seed(seed)
        layers = max(1, round(params / 4096**2))
        self.net = torch.nn.Sequential(
            *[torch.nn.Linear(4096, 4096, bias=False) for _ in range(layers)]
        )

    def weights(self):
        return self.net.state_dict()

    def noop(self):
        return None


def plan(placement):
    return build_plan(placement, ROLES, num_nodes=1, devices_per_node=2, device="cpu")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--params", type=float, default=100e6)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--syncs", type=int, default=3)
    args = parser.parse_args()
    out: dict[str, float | int | str] = {"torch_threads": torch.get_num_threads()}

    start = time.perf_counter()
    scheduler = Scheduler(plan({"actor": "0", "rollout": "1"}))
    scheduler.start()
    out["start_s"] = round(time.perf_counter() - start, 2)
    try:
        actor = scheduler.launch("actor", Dense, args.params, 0)
        rollout = scheduler.launch("rollout", Dense, args.params, 1)
        out["params"] = sum(t.numel() for t in actor.call_rank(0, "weights").values())
        actor.call_rank(0, "noop")
        ms = median_seconds(lambda: actor.call_rank(0, "noop"), args.calls) * 1000
        out["noop_round_trip_ms"] = round(ms, 3)
        # Two processes at once: the actor's and the rollout's.
        pair = [actor.handles[0], rollout.handles[0]]
        ms = median_seconds(
            lambda: scheduler.group("actor").get(
                [
                    h.call.remote(c, "noop", (), {})
                    for h, c in zip(pair, ["actor", "rollout"], strict=True)
                ]
            ),
            args.calls,
        )
        out["noop_round_trip_2_ranks_ms"] = round(ms * 1000, 3)
        for method in ("object_store", "ipc", "collective", "object_store", "ipc", "collective"):
            scheduler.sync_weights("actor", "rollout", method=method)  # warm-up, group set-up
            seconds = median_seconds(
                lambda m=method: scheduler.sync_weights("actor", "rollout", method=m), args.syncs
            )
            out.setdefault(f"sync_{method}_s", []).append(round(seconds, 3))  # two rounds
    finally:
        start = time.perf_counter()
        scheduler.shutdown()
        out["stop_s"] = round(time.perf_counter() - start, 2)

    with Scheduler(plan({"actor,rollout": "0"})) as fused:
        fused.launch("actor", Dense, args.params, 0)
        fused.launch("rollout", Dense, args.params, 1)
        fused.sync_weights("actor", "rollout")
        seconds = median_seconds(lambda: fused.sync_weights("actor", "rollout"), args.syncs)
        out["sync_in_process_s"] = round(seconds, 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
