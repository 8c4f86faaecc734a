"""How a trained model is spread over a component's ranks: the seam the trainer talks through.

A ``Strategy`` wraps the model for training, says how each rank's loss must be scaled so that the
summed gradient is the global batch's, lets gradients accumulate over micro-batches without
communicating, sums tensors over the ranks, and gathers / scatters the full weights (for weight
sync and checkpoints; with sharded parameters these are collectives every rank joins).

Built: ``single`` (one rank), ``ddp`` (``DistributedDataParallel``: every rank holds the whole
model, gradients are averaged) and ``fsdp2`` (``fully_shard``: parameters, gradients and
optimiser state sharded over the component's ranks); ``megatron`` (tensor and pipeline parallel
Megatron-core models, ``megatron_strategy.py``).
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import nn

from rlcore.workers.files.state_files import writing
from rlcore.workers.files.weights_file import SHARDS, Saved, WholeWeightsCheckpoint


class Strategy(Protocol):
    name: str
    rank: int
    world_size: int
    # The parameters are not one whole transformers-style model on this rank (FSDP2's shards or
    # casts, Megatron's converted model): the module cannot generate alone, so a rollout keeps
    # a whole copy of its own.
    shards: bool
    # Pipeline stages the model is split into (Megatron's): above 1, passes over micro-batches
    # run through the strategy's ``pipeline`` method, not by calling the model.
    pipeline_size: int
    # What ``save`` writes: "whole" (the whole weights) or "shards" (torch.distributed.checkpoint
    # shards); the trainer records it beside the checkpoint and hands it back to ``load``.
    form: str

    def convert(self, model: nn.Module) -> nn.Module:
        """The model this strategy trains, from the one the component loaded (the same one, but
        under Megatron: its shard of a converted model)."""
        ...

    def wrap(self, model: nn.Module) -> nn.Module:
        """The module to run forward and backward passes through."""
        ...

    def local_batch(self, batch: Any) -> tuple[Any, slice]:
        """The rows this rank computes on, given the rows the dispatch gave it, and where those
        lie among them (under tensor parallelism a group of ranks computes on all its rows)."""
        ...

    def weight_tensors(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """What a weight sync sends, nothing gathered where it can be (``DTensor`` shards)."""
        ...

    @property
    def loss_scale(self) -> float:
        """Each rank's loss is multiplied by this before ``backward``."""
        ...

    def no_sync(self, module: nn.Module) -> contextlib.AbstractContextManager:
        """A context in which ``backward`` accumulates gradients without communication."""
        ...

    def all_reduce(self, tensor: torch.Tensor, op: Any = None) -> torch.Tensor:
        """``tensor`` reduced over the ranks by ``op`` (a ``ReduceOp``; None: summed), in place,
        and returned."""
        ...

    def full_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """The whole model's tensors by name, on every rank."""
        ...

    def load_full_state_dict(self, model: nn.Module, state: dict[str, torch.Tensor]) -> None:
        """Load whole-model tensors (as ``full_state_dict`` gives them) into ``model``."""
        ...

    def clip_grad_norm(self, model: nn.Module, max_norm: float) -> torch.Tensor:
        """Clip the whole model's gradient norm to ``max_norm``; the norm before clipping, a
        plain tensor, the same on every rank."""
        ...

    def save(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, directory: Path, rank: int
    ) -> dict | None:
        """Checkpoint the weights and the optimiser into ``directory`` (``rank``: this process's
        rank, naming its files); what this rank's trainer file keeps for ``load`` (plain
        tensors), or None where the strategy wrote all of it as files. Every rank calls it."""
        ...

    def load(self, model: nn.Module, optimizer: torch.optim.Optimizer, saved: Saved) -> None:
        """Restore what ``save`` wrote (in ``saved.form``, and returned as ``saved.state``), or
        refuse a form this strategy cannot read, naming the backend that wrote it."""
        ...

    def save_optimizer(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, directory: Path
    ) -> dict | None:
        """Checkpoint the optimiser into the checkpoint ``directory``: what this rank's trainer
        file keeps for ``load_optimizer`` (plain tensors), or None where the strategy wrote
        files of its own there (every rank calls it)."""
        ...

    def load_optimizer(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, saved: Saved
    ) -> None:
        """Restore the optimiser from what ``save_optimizer`` wrote and returned."""
        ...


class SingleProcess(WholeWeightsCheckpoint):
    """One rank: the model as it is."""

    name = "single"
    rank = 0
    world_size = 1
    loss_scale = 1.0
    pipeline_size = 1
    shards = False

    def convert(self, model: nn.Module) -> nn.Module:
        return model

    def wrap(self, model: nn.Module) -> nn.Module:
        return model

    def no_sync(self, module: nn.Module) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def local_batch(self, batch: Any) -> tuple[Any, slice]:
        return batch, slice(None)

    def weight_tensors(self, model: nn.Module) -> dict[str, torch.Tensor]:
        return dict(model.state_dict())

    def all_reduce(self, tensor: torch.Tensor, op: Any = None) -> torch.Tensor:
        return tensor

    def full_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        return dict(model.state_dict())

    def load_full_state_dict(self, model: nn.Module, state: dict[str, torch.Tensor]) -> None:
        model.load_state_dict(state)

    def clip_grad_norm(self, model: nn.Module, max_norm: float) -> torch.Tensor:
        return nn.utils.clip_grad_norm_(model.parameters(), max_norm)

    def save_optimizer(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, directory: Path
    ) -> dict | None:
        """The whole (unsharded) optimiser state keyed by parameter name, so that it loads
        under any strategy but Megatron's and onto any number of ranks (a collective under
        FSDP2)."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_optimizer_state_dict,
        )

        options = StateDictOptions(full_state_dict=True)
        return get_optimizer_state_dict(model, optimizer, options=options)

    def load_optimizer(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, saved: Saved
    ) -> None:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_optimizer_state_dict,
        )

        if saved.state is None:
            raise ValueError(
                f"{saved.directory}: the optimiser state was written by the megatron "
                "training backend (Megatron's own sharded format); resume with "
                "training_backend megatron"
            )
        options = StateDictOptions(full_state_dict=True)
        set_optimizer_state_dict(model, optimizer, saved.state, options=options)


class DistributedDataParallel(SingleProcess):
    """Whole model on every rank; DDP averages the gradients, so each rank's loss (its share of
    the global loss) is scaled by the world size to make the sum the global gradient."""

    name = "ddp"

    def __init__(self, group: Any, rank: int, world_size: int) -> None:
        self.group, self.rank, self.world_size = group, rank, world_size
        self.loss_scale = float(world_size)

    def wrap(self, model: nn.Module) -> nn.Module:
        # A vision-language model's trained vision tower has weights no loss reaches (LLaVA's
        # CLIP post-layernorm, which only its unused pooled output reads; the layers after
        # vision_feature_layer), which DDP's reducer would wait for: it is told to look for them
        return nn.parallel.DistributedDataParallel(
            model, process_group=self.group, find_unused_parameters=_trained_tower(model)
        )

    def no_sync(self, module: nn.Module) -> contextlib.AbstractContextManager:
        return module.no_sync()

    def all_reduce(self, tensor: torch.Tensor, op: Any = None) -> torch.Tensor:
        dist.all_reduce(tensor, op=op or dist.ReduceOp.SUM, group=self.group)
        return tensor


class _SequenceGroups:
    """A component's ranks grouped ``sequence_parallel`` at a time (Ulysses,
    ``rlcore.models.ulysses``): the ranks of a group (consecutive) compute on the same rows, each
    on its slice of every packed row, so the data-parallel size is ``world / sequence_parallel``.
    As under Megatron's tensor parallelism, ``local_batch`` gathers the rows the dispatch gave
    the group's ranks, and counts and metrics are reduced over the data-parallel group (ranks of
    one position in their groups). Gradients: each rank's are its own tokens' part; DDP and
    FSDP2 average them over every rank, and the loss scale (the whole world) makes that average
    their sum."""

    def _split(self, group: Any, rank: int, world_size: int, size: int) -> None:
        ranks = dist.get_process_group_ranks(group)
        # every rank creates every group, in the same order (torch's rule for new_group)
        sequences = [dist.new_group(ranks[i : i + size]) for i in range(0, len(ranks), size)]
        data = [dist.new_group(ranks[i::size]) for i in range(size)]
        self.sp_size, self.sp_group = size, sequences[rank // size]
        self.dp_group = data[rank % size]
        self.world_size = world_size // size  # data-parallel: the trainer's rows and means
        self.loss_scale = float(world_size)

    def local_batch(self, batch: Any) -> tuple[Any, slice]:
        parts: list[Any] = [None] * self.sp_size
        dist.all_gather_object(parts, batch.cpu(), group=self.sp_group)
        start = sum(len(part) for part in parts[: dist.get_rank(self.sp_group)])
        return torch.cat(parts).to(batch.device), slice(start, start + len(batch))

    def all_reduce(self, tensor: torch.Tensor, op: Any = None) -> torch.Tensor:
        dist.all_reduce(tensor, op=op or dist.ReduceOp.SUM, group=self.dp_group)
        return tensor


class SequenceParallelDDP(_SequenceGroups, DistributedDataParallel):
    """DDP with Ulysses groups (``_SequenceGroups``)."""

    name = "ddp+sp"

    def __init__(self, group: Any, rank: int, world_size: int, sequence_parallel: int) -> None:
        DistributedDataParallel.__init__(self, group, rank, world_size)
        self._split(group, rank, world_size, sequence_parallel)


@dataclass(frozen=True)
class FsdpOptions:
    """FSDP2's mixed precision and offload (the ``fsdp`` config section, as torch dtypes)."""

    param_dtype: torch.dtype | None = None  # None: parameters are not cast
    reduce_dtype: torch.dtype = torch.float32
    offload: bool = False

    @classmethod
    def of(cls, section: Any) -> FsdpOptions:
        """From a component's ``fsdp`` config section (None: the defaults)."""
        if section is None:
            return cls()
        dtype = None if section.param_dtype is None else getattr(torch, section.param_dtype)
        return cls(dtype, getattr(torch, section.reduce_dtype), section.offload)


class FullyShardedDataParallel(DistributedDataParallel):
    """FSDP2: ``fully_shard`` on each repeated block (an HF decoder layer) and at the root, on a
    device mesh over the component's own group. Each rank holds 1/world of the parameters,
    gradients and optimiser state; a forward pass gathers a block's parameters and a backward
    pass reduce-scatters its gradients, averaged like DDP's, hence DDP's loss scale and
    reductions over the group. With
    ``options.param_dtype`` the gathered parameters are cast to it for the passes (the sharded
    ones the optimiser updates keep their dtype) and gradients are reduced in ``reduce_dtype``;
    with ``options.offload`` the shards live in CPU memory between uses.

    Every method that touches whole weights (``full_state_dict``, checkpoints) is a collective:
    every rank of the component calls it. The optimiser is built after ``wrap``, over the sharded
    parameters.
    """

    name = "fsdp2"
    shards = True
    form = "shards"

    def __init__(
        self,
        group: Any,
        rank: int,
        world_size: int,
        device: torch.device,
        options: FsdpOptions | None = None,
    ) -> None:
        super().__init__(group, rank, world_size)
        self.device, self.options = device, options or FsdpOptions()
        if self.options.offload and device.type != "cuda":
            raise ValueError(
                f"fsdp.offload moves a GPU model's shards to the CPU; the model is on {device}"
            )

    def wrap(self, model: nn.Module) -> nn.Module:
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.fsdp import (
            CPUOffloadPolicy,
            MixedPrecisionPolicy,
            OffloadPolicy,
            fully_shard,
        )

        # FSDP2 warns when a wrapped module returns a view (an in-place op on it would skip its
        # backward hook); the value model's logits are one, and rlcore never edits an output in
        # place, so the warning would only repeat every step
        warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view")
        options = self.options
        mesh = DeviceMesh.from_group(self.group, self.device.type)
        policy = {
            "mesh": mesh,
            "mp_policy": MixedPrecisionPolicy(
                param_dtype=options.param_dtype, reduce_dtype=options.reduce_dtype
            )
            if options.param_dtype is not None
            else MixedPrecisionPolicy(),
            "offload_policy": CPUOffloadPolicy() if options.offload else OffloadPolicy(),
        }
        for block in _repeated_blocks(model):
            fully_shard(block, **policy)
        fully_shard(model, **policy)
        return model

    def no_sync(self, module: nn.Module) -> contextlib.AbstractContextManager:
        @contextlib.contextmanager
        def accumulate():
            module.set_requires_gradient_sync(False)
            try:
                yield
            finally:
                module.set_requires_gradient_sync(True)

        return accumulate()

    def full_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))

    def load_full_state_dict(self, model: nn.Module, state: dict[str, torch.Tensor]) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True))

    def clip_grad_norm(self, model: nn.Module, max_norm: float) -> torch.Tensor:
        norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        return norm.full_tensor() if hasattr(norm, "full_tensor") else norm  # DTensor -> plain

    def save(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, directory: Path, rank: int
    ) -> dict | None:
        """Every rank its shards of the weights and optimiser state (``SHARDS``, written by
        ``torch.distributed.checkpoint``; no rank gathers the whole model): they load onto any
        number of ranks, under any strategy but Megatron's."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        weights, moments = get_state_dict(model, optimizer)
        with writing(directory / SHARDS):
            dcp.save(
                {"model": weights, "optimizer": moments},
                checkpoint_id=str(directory / SHARDS),
                process_group=self.group,
            )
        return None


def _repeated_blocks(model: nn.Module) -> list[nn.Module]:
    """The items of the model's outermost ``nn.ModuleList``s (an HF model's decoder layers):
    each becomes one FSDP unit, gathered for its own forward and backward."""
    blocks: list[nn.Module] = []
    inside: set[int] = set()  # modules within a block already taken
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and id(module) not in inside:
            blocks.extend(module)
            inside.update(id(m) for block in module for m in block.modules())
    return blocks


class SequenceParallelFSDP(_SequenceGroups, FullyShardedDataParallel):
    """FSDP2 over the whole group with Ulysses groups (``_SequenceGroups``)."""

    name = "fsdp2+sp"

    def __init__(
        self,
        group: Any,
        rank: int,
        world_size: int,
        device: torch.device,
        fsdp: FsdpOptions | None,
        sequence_parallel: int,
    ) -> None:
        FullyShardedDataParallel.__init__(self, group, rank, world_size, device, fsdp)
        self._split(group, rank, world_size, sequence_parallel)


BACKENDS = ("torch", "fsdp2", "megatron")


def make_strategy(
    ctx: Any,
    backend: str = "torch",
    fsdp: FsdpOptions | None = None,
    megatron: Any = None,
    sequence_parallel: int = 1,
) -> Strategy:
    """``backend`` torch: DDP over the component's group when it has several ranks, else a single
    process. fsdp2: ``fully_shard`` over the group, with ``fsdp``'s mixed precision and
    offload; on one rank over a group of one (``one_rank_group``): nothing is sharded, and the
    arithmetic is a single process's unless ``fsdp`` casts. megatron: ``megatron``'s
    ``MegatronOptions`` (tensor-parallel size, seed). ``sequence_parallel`` above 1: DDP or
    FSDP2 over groups of that many ranks computing on the same rows (``_SequenceGroups``)."""
    if backend not in BACKENDS:
        raise ValueError(f"training backend {backend!r}: built are {', '.join(BACKENDS)}")
    world = getattr(ctx, "world_size", 1)
    device = ctx.torch_device if ctx is not None else torch.device("cpu")
    if sequence_parallel > 1:
        if backend == "megatron" or world % sequence_parallel:
            raise ValueError(
                f"sequence parallel over {sequence_parallel} ranks: built on the torch and "
                f"fsdp2 backends over a multiple of that many ranks (here {backend}, {world})"
            )
        if backend == "fsdp2":
            return SequenceParallelFSDP(ctx.group, ctx.rank, world, device, fsdp, sequence_parallel)
        return SequenceParallelDDP(ctx.group, ctx.rank, world, sequence_parallel)
    if backend == "megatron":
        from rlcore.workers.training.megatron_strategy import MegatronOptions, MegatronParallel

        if not dist.is_initialized():
            one_rank_group(device)
        return MegatronParallel(device, megatron or MegatronOptions())
    if backend == "fsdp2":
        group = getattr(ctx, "group", None) or one_rank_group(device)
        return FullyShardedDataParallel(group, getattr(ctx, "rank", 0), world, device, fsdp)
    if world == 1:
        return SingleProcess()
    return DistributedDataParallel(ctx.group, ctx.rank, world)


def _trained_tower(model: nn.Module) -> bool:
    """Whether ``model`` has a vision tower with weights in training
    (``actor.model.freeze_vision_tower`` false)."""
    from rlcore.models.lm import vision_tower

    tower = vision_tower(model)
    return tower is not None and any(p.requires_grad for p in tower[1].parameters())


def one_rank_group(device: torch.device) -> Any:
    """A process group of this process alone, for FSDP2 on one rank: the default group when it
    is already this process alone, else one started here over an in-memory store (so nothing
    listens on a port)."""
    if dist.is_initialized():
        if dist.get_world_size() != 1:
            raise ValueError(
                "fsdp2 on one rank in a process whose default group has "
                f"{dist.get_world_size()} ranks: give the component its own group"
            )
        return dist.group.WORLD
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    return dist.group.WORLD
