"""Two data-parallel CPU ranks produce the same update as one rank on the same global batch: the
same gradient (to float rounding), and so the same parameters after several Adam steps (Adam
divides by sqrt(v): where a gradient nearly cancels over the batch, such as the policy head's
bias, rounding differences of the summation order grow to ~1e-6)."""

import os
from types import SimpleNamespace

import torch
import torch.distributed as dist
from tensordict import TensorDict

from rlcore.columns import LOSS_MASK, OLD_LOG_PROBS
from rlcore.config import load_config
from rlcore.envs.vector import SpaceSpec
from rlcore.workers.embodied.embodied_actor import EmbodiedActor
from rlcore.workers.embodied.embodied_rollout import make_policy
from tests.rank_pool import rank_pool

SPEC = SpaceSpec((4,), "discrete", (2,))
OVERRIDES = [
    "actor.ppo_epochs=3",
    "actor.ppo_mini_batch_size=64",
    "algorithm.entropy_bonus=0.01",
    "algorithm.value_clip=0.2",
    "actor.model.shared_backbone=true",
    "actor.model.hidden_sizes=[16,16]",
]
CONFIG = load_config("embodied/cartpole_ppo", OVERRIDES)
ONE_STEP = load_config("embodied/cartpole_ppo", [*OVERRIDES, "actor.ppo_epochs=1"])


def make_batch() -> TensorDict:
    """64 envs x 1 step, with made-up advantages and returns."""
    gen = torch.Generator().manual_seed(7)
    obs = torch.randn(64, 4, generator=gen)
    with torch.no_grad():
        actions, log_probs, values = make_policy(CONFIG, SPEC).act(obs)
    obs, actions, log_probs, values = (x[:, None] for x in (obs, actions, log_probs, values))
    valid = torch.ones(64, 1, dtype=torch.bool)
    valid[:32:16] = False  # rank 0's half: 30 valid transitions
    valid[32::3] = False  # rank 1's half: 21 valid: the shares of the loss differ
    return TensorDict(
        {
            "obs": obs,
            "actions": actions,
            OLD_LOG_PROBS: log_probs,
            "values": values,
            "advantages": torch.randn(64, 1, generator=gen),
            "returns": torch.randn(64, 1, generator=gen),
            LOSS_MASK: valid,
        },
        batch_size=[64],
    )


def update(ctx, batch) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The gradient of one optimiser step on ``batch``, and the parameters after 3 epochs."""
    one = EmbodiedActor(ctx, ONE_STEP, SPEC)
    one.update(batch)  # one mini-batch, one step: .grad holds its (all-reduced) gradient
    grads = {n: p.grad.clone() for n, p in one.model.named_parameters()}
    actor = EmbodiedActor(ctx, CONFIG, SPEC)
    actor.update(batch)
    return grads, {k: v.detach().clone() for k, v in actor.model.state_dict().items()}


def context(rank: int, world: int, group=None) -> SimpleNamespace:
    return SimpleNamespace(
        rank=rank, world_size=world, group=group, torch_device=torch.device("cpu")
    )


def rank_main(rank: int, out: str) -> None:
    """Rank ``rank`` of the pool's 2 (tests/rank_pool.py) on its half of the batch."""
    shard = make_batch()[rank * 32 : (rank + 1) * 32]
    torch.save(
        update(context(rank, 2, dist.group.WORLD), shard), os.path.join(out, f"rank{rank}.pt")
    )


def test_two_ranks_update_like_one_rank_on_the_global_batch(tmp_path):
    grads, single = update(context(0, 1), make_batch())
    rank_pool(2).run(rank_main, str(tmp_path))
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)]
    for name, grad in grads.items():
        assert torch.equal(ranks[0][0][name], ranks[1][0][name]), f"ranks disagree on {name}"
        assert torch.allclose(ranks[0][0][name], grad, rtol=1e-5, atol=1e-8), name
    start = make_policy(CONFIG, SPEC).state_dict()
    for name, value in single.items():
        assert torch.equal(ranks[0][1][name], ranks[1][1][name]), f"ranks disagree on {name}"
        assert torch.allclose(ranks[0][1][name], value, atol=1e-5), f"{name} differs from 1 rank"
    assert any(not torch.equal(v, start[k]) for k, v in single.items())  # the update did something
