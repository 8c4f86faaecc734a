"""Two data-parallel CPU ranks produce the same update as one rank on the same global batch."""

import os
import socket
from types import SimpleNamespace

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from rlcore.config import load_config
from rlcore.envs.vector import SpaceSpec
from rlcore.models import ActorCritic
from rlcore.workers.embodied_actor import EmbodiedActor

SPEC = SpaceSpec((4,), "discrete", (2,))
OVERRIDES = ["actor.ppo_epochs=3", "actor.ppo_mini_batch_size=64", "algorithm.entropy_bonus=0.01",
             "algorithm.value_clip=0.2", "actor.model.shared_backbone=true"]  # fmt: skip


def make_batch() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(7)
    obs = torch.randn(64, 4, generator=gen)
    with torch.no_grad():
        actions, log_probs, values = fresh_model().act(obs)
    valid = torch.ones(64, dtype=torch.bool)
    valid[:32:16] = False  # rank 0's half: 30 valid transitions
    valid[32::3] = False  # rank 1's half: 21 valid: the shares of the loss differ
    return {
        "obs": obs, "actions": actions, "log_probs": log_probs, "values": values,
        "advantages": torch.randn(64, generator=gen), "returns": torch.randn(64, generator=gen),
        "valid": valid,
    }  # fmt: skip


def fresh_model() -> ActorCritic:
    torch.manual_seed(0)
    return ActorCritic(SPEC, [16, 16])


def update(ctx, batch) -> dict[str, torch.Tensor]:
    model = fresh_model()
    actor = EmbodiedActor(ctx, load_config("embodied/cartpole_ppo", OVERRIDES), model)
    actor.update(batch, torch.Generator().manual_seed(0))
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def rank_main(rank: int, port: int, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        shard = {k: v[rank * 32 : (rank + 1) * 32] for k, v in make_batch().items()}
        params = update(SimpleNamespace(group=dist.group.WORLD, world_size=2), shard)
        torch.save(params, os.path.join(out, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_ranks_update_like_one_rank_on_the_global_batch(tmp_path):
    single = update(None, make_batch())
    mp.spawn(rank_main, args=(free_port(), str(tmp_path)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)]
    for name, value in single.items():
        assert torch.equal(ranks[0][name], ranks[1][name]), f"ranks disagree on {name}"
        assert torch.allclose(ranks[0][name], value, atol=1e-6), f"{name} differs from 1 rank"
    moved = any(not torch.equal(v, fresh_model().state_dict()[k]) for k, v in single.items())
    assert moved  # the update did something
