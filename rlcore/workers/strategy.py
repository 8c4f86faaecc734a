"""How a trained model is spread over a component's ranks: the seam the trainer talks through.

A ``Strategy`` wraps the model for training, says how each rank's loss must be scaled so that the
summed gradient is the global batch's, lets gradients accumulate over micro-batches without
communicating, sums tensors over the ranks, and gathers / scatters the full weights (for weight
sync and checkpoints; with sharded parameters these are collectives every rank joins).

Built: ``single`` (one rank) and ``ddp`` (``DistributedDataParallel``: every rank holds the whole
model, gradients are averaged). Sharded strategies (FSDP2, Megatron-core) plug in here.
"""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import nn


class Strategy(Protocol):
    name: str
    rank: int
    world_size: int

    def wrap(self, model: nn.Module) -> nn.Module:
        """The module to run forward and backward passes through."""
        ...

    @property
    def loss_scale(self) -> float:
        """Each rank's loss is multiplied by this before ``backward``."""
        ...

    def no_sync(self, module: nn.Module) -> contextlib.AbstractContextManager:
        """A context in which ``backward`` accumulates gradients without communication."""
        ...

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` summed over the ranks (in place, and returned)."""
        ...

    def full_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """The whole model's tensors by name, on every rank."""
        ...

    def load_full_state_dict(self, model: nn.Module, state: dict[str, torch.Tensor]) -> None:
        """Load whole-model tensors (as ``full_state_dict`` gives them) into ``model``."""
        ...


class SingleProcess:
    """One rank: the model as it is."""

    name = "single"
    rank = 0
    world_size = 1
    loss_scale = 1.0

    def wrap(self, model: nn.Module) -> nn.Module:
        return model

    def no_sync(self, module: nn.Module) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def full_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        return dict(model.state_dict())

    def load_full_state_dict(self, model: nn.Module, state: dict[str, torch.Tensor]) -> None:
        model.load_state_dict(state)


class DistributedDataParallel(SingleProcess):
    """Whole model on every rank; DDP averages the gradients, so each rank's loss (its share of
    the global loss) is scaled by the world size to make the sum the global gradient."""

    name = "ddp"

    def __init__(self, group: Any, rank: int, world_size: int) -> None:
        self.group, self.rank, self.world_size = group, rank, world_size
        self.loss_scale = float(world_size)

    def wrap(self, model: nn.Module) -> nn.Module:
        return nn.parallel.DistributedDataParallel(model, process_group=self.group)

    def no_sync(self, module: nn.Module) -> contextlib.AbstractContextManager:
        return module.no_sync()

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(tensor, group=self.group)
        return tensor


def make_strategy(ctx: Any) -> Strategy:
    """DDP over the component's group when it has several ranks, else a single process."""
    world = getattr(ctx, "world_size", 1)
    if world > 1:
        return DistributedDataParallel(ctx.group, ctx.rank, world)
    return SingleProcess()
