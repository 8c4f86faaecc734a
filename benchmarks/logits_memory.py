"""Peak memory of the log-probs and entropies of one update micro-batch's logits, forward and
backward, with and without ``actor.entropy_from_logits_with_chunking`` and
``actor.entropy_checkpointing``: one JSON line per variant, each run in a fresh process (its
peak resident memory over what the logits themselves take).

    python benchmarks/logits_memory.py [--rows 8] [--positions 256] [--vocab 32000] [--chunk 256]

On a GPU the same tensors live in GPU memory: the 0.5B model's update at micro-batch 64 peaked
at 98-108 GiB on an H200 (docs/backends.md), most of it such float32 copies of the logits.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

VARIANTS = {  # (chunked, checkpointed)
    "plain": (False, False),
    "chunked": (True, False),
    "checkpointed": (False, True),
    "chunked+checkpointed": (True, True),
}

CHILD = """
import json, resource, sys, time
import torch
from rlcore.models.forward import log_probs_and_entropy
rows, positions, vocab, chunk, checkpoint = json.loads(sys.argv[1])
torch.manual_seed(0)
torch.set_num_threads(1)
logits = torch.randn(rows, positions, vocab, requires_grad=True)
tokens = torch.randint(0, vocab, (rows, positions))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
logp, entropy = log_probs_and_entropy(logits, tokens, 1.0, chunk, checkpoint)
(logp.mean() + 0.01 * entropy.mean()).backward()
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
over = round((peak - before) / 1024, 1)
print(json.dumps({"peak_over_logits_mib": over, "seconds": round(seconds, 3)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--positions", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--chunk", type=int, default=256, help="positions a chunk")
    args = parser.parse_args()
    logits_mib = args.rows * args.positions * args.vocab * 4 / 2**20
    for name, (chunked, checkpoint) in VARIANTS.items():
        chunk = args.chunk if chunked else None
        spec = json.dumps([args.rows, args.positions, args.vocab, chunk, checkpoint])
        done = subprocess.run(
            [sys.executable, "-c", CHILD, spec], capture_output=True, text=True, check=True
        )
        row = json.loads(done.stdout.strip().splitlines()[-1])
        print(json.dumps({"variant": name, "logits_mib": round(logits_mib, 1), **row}), flush=True)


if __name__ == "__main__":
    main()
