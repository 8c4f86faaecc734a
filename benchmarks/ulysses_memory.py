"""Ulysses sequence parallelism's memory (issue 53): the activations one rank keeps for the
backward pass of a long-response packed batch, alone and split over ``--ranks`` gloo ranks, and
the loss both compute. One JSON line.

    python benchmarks/ulysses_memory.py [--ranks 2] [--rows 2] [--length 2048] [--layers 4]

Activation memory is counted exactly, not sampled: every tensor autograd saves for the backward
pass during the forward (``torch.autograd.graph.saved_tensors_hooks``), each storage once, the
model's own weights left out. That is what grows with the sequence and what a split divides; a
process's peak also holds the weights, the optimiser state and the allocator's slack, which a
split does not change (Megatron's and DeepSpeed's papers count activations the same way).
``reduction``: 1 - the largest rank's activations / one rank's alone.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def model_and_batch(args: argparse.Namespace):
    from tensordict import TensorDict
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from rlcore.data.sequences import position_ids

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=4 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.heads,
        max_position_embeddings=args.length + 16,
    )
    model = Qwen2ForCausalLM(config)
    prompt, response = 16, args.length - 16
    ids = torch.randint(1, args.vocab, (args.rows, prompt + response))
    mask = torch.ones_like(ids)
    batch = TensorDict(
        {
            "input_ids": ids,
            "attention_mask": mask,
            "position_ids": position_ids(mask),
            "responses": ids[:, prompt:],
            "response_mask": torch.ones(args.rows, response, dtype=torch.long),
        },
        batch_size=[args.rows],
    )
    return model, batch


class SavedBytes:
    """The bytes of the storages autograd saves for the backward pass within it (each once),
    those of ``model``'s parameters left out."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.storages: dict[int, int] = {}

    def __enter__(self):
        def pack(t: torch.Tensor) -> torch.Tensor:
            storage = t.untyped_storage()
            if storage.data_ptr() not in self.weights:
                self.storages[storage.data_ptr()] = storage.nbytes()
            return t

        self.hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
        self.hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.hooks.__exit__(*exc)

    @property
    def mib(self) -> float:
        return sum(self.storages.values()) / 2**20


def alone(args: argparse.Namespace) -> tuple[float, float]:
    from rlcore.models.forward import response_log_probs
    from rlcore.models.fused_head import TokenStats

    model, batch = model_and_batch(args)
    model, batch = model.to(args.device), batch.to(args.device)
    stats = TokenStats(temperature=1.0, chunk_size=None, entropy=False)
    with SavedBytes(model) as saved:
        logp, _, _ = response_log_probs(model, batch, stats, packed=True)
    loss = -logp.sum()
    loss.backward()
    return saved.mib, float(loss)


def rank_main(rank: int, args: argparse.Namespace, port: int, out: str) -> None:
    from rlcore.models import ulysses

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    backend, device = ("nccl", f"cuda:{rank}") if args.device == "cuda" else ("gloo", "cpu")
    dist.init_process_group(backend, rank=rank, world_size=args.ranks)
    model, batch = model_and_batch(args)
    model, batch = model.to(device), batch.to(device)
    with SavedBytes(model) as saved:
        logp, _ = ulysses.packed_log_probs(model, batch, dist.group.WORLD, entropy=False)
    loss = -logp.sum()
    loss.backward()
    Path(out, f"rank{rank}.json").write_text(json.dumps([saved.mib, float(loss.detach())]))
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rows", type=int, default=2)
    parser.add_argument("--length", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu", help="cuda: NCCL, one GPU a rank"
    )
    args = parser.parse_args()
    print(json.dumps(measure(args)))


def measure(args: argparse.Namespace) -> dict:
    """``main``'s measurement of ``args`` (its options) as a dict."""
    from rlcore.procpool import forkserver_context

    torch.set_num_threads(1)
    single_mib, single_loss = alone(args)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # the ranks forked by rlcore's fork server, which imported torch and rlcore once, not
    # spawned (each a new interpreter importing them again: about 3 CPU-s a rank here)
    forkserver_context(("rlcore.models.ulysses",))
    with tempfile.TemporaryDirectory() as out:
        mp.start_processes(
            rank_main, args=(args, port, out), nprocs=args.ranks, start_method="forkserver"
        )
        ranks = [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(args.ranks)]
    per_rank = [round(mib, 2) for mib, _ in ranks]
    return {
        "ranks": args.ranks,
        "rows": args.rows,
        "length": args.length,
        "layers": args.layers,
        "hidden": args.hidden,
        "alone_activation_mib": round(single_mib, 2),
        "per_rank_activation_mib": per_rank,
        "reduction": round(1 - max(per_rank) / single_mib, 4),
        "loss_alone": single_loss,
        "loss_split": ranks[0][1],
    }


if __name__ == "__main__":
    main()
