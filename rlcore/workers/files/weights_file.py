"""Whole-model weights as one safetensors file, with tensors shared under several names kept shared;
and reading a trained component's weights from its checkpoint folder in either of its forms.

safetensors refuses two names for one storage (a shared trunk registered as both the policy's and
the value's), so each storage is written once and the other names are listed in the file's
metadata as aliases of the first.

A component trained with FSDP2 checkpoints as ``torch.distributed.checkpoint`` shards, every rank
its own (``SHARDS``), which load onto any number of ranks; any other as ``model.safetensors``
(``WholeWeightsCheckpoint``: the checkpoint methods of the strategies that write that form).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from rlcore.workers.files.state_files import load_state, writing

WEIGHTS = "model.safetensors"  # a component's whole weights, written by its rank 0
SHARDS = "shards"  # a sharded component's torch.distributed.checkpoint folder (weights, optimiser)
# a Megatron component's optimiser state: Megatron's distributed checkpoint (dist_checkpointing)
MEGATRON_OPTIMIZER = "megatron_optimizer"


def save_weights(state: dict[str, torch.Tensor], path: Path) -> None:
    unique: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    first_name: dict[tuple[int, int, tuple[int, ...]], str] = {}
    for name, tensor in state.items():
        identity = (
            tensor.untyped_storage().data_ptr(),
            tensor.storage_offset(),
            tuple(tensor.shape),
        )
        if identity in first_name:
            aliases[name] = first_name[identity]
        else:
            first_name[identity] = name
            unique[name] = tensor.detach().contiguous().cpu()
    with writing(path):
        save_file(unique, str(path), metadata={"aliases": json.dumps(aliases)})


def load_weights(path: Path) -> dict[str, torch.Tensor]:
    with safe_open(str(path), framework="pt") as weights:
        state = {name: weights.get_tensor(name) for name in weights.keys()}  # noqa: SIM118
        aliases = json.loads((weights.metadata() or {}).get("aliases", "{}"))
    for name, source in aliases.items():
        state[name] = state[source]
    return state


def recorded_form(folder: Path, trainer_state: dict | None = None) -> str:
    """The form a component's checkpoint ``folder`` was written in ("whole" or "shards"), as
    its trainer recorded it (``trainer_state``: a rank's trainer file, else rank 0's is read),
    not as the folders present suggest. An earlier version recorded none: its whole weights
    are ``WEIGHTS``, else it wrote shards."""
    if trainer_state is None:
        rank0 = folder / "trainer_rank0.pt"
        trainer_state = load_state(rank0, mmap=True) if rank0.is_file() else {}
    form = trainer_state.get("form")
    return form or ("whole" if (folder / WEIGHTS).is_file() else "shards")


def read_trained_weights(folder: Path, model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole weights in a component's checkpoint ``folder`` (``WEIGHTS``, or the ``SHARDS``
    any number of ranks wrote, read here into tensors shaped as ``model``'s), by name."""
    if recorded_form(folder) == "whole":
        return load_weights(folder / WEIGHTS)
    import warnings

    from rlcore.workers.files.shard_reader import load_shards_into

    state = {k: torch.empty_like(v) for k, v in model.state_dict().items()}
    with warnings.catch_warnings():  # that one process reads them is the intent here
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        load_shards_into({"model": state}, folder / SHARDS, no_dist=True)
    return state


@dataclass(frozen=True)
class Saved:
    """A checkpoint as ``Strategy.load`` reads it: its ``directory``, what this rank's ``save``
    returned (``state``: the optimiser's, kept in the trainer file; None where the strategy
    wrote files of its own) and the ``form`` the trainer recorded ("whole" or "shards")."""

    directory: Path
    state: dict | None
    form: str = "whole"


class WholeWeightsCheckpoint:
    """The checkpoint form of every strategy but FSDP2's: rank 0 writes the whole weights
    (``WEIGHTS``), every rank its optimiser state as ``save_optimizer`` keeps it. ``load`` also
    reads FSDP2's shards (``SHARDS``), onto any number of ranks. ``form`` names what ``save``
    writes; the trainer records it, and ``load`` reads the form recorded, never the one a
    folder's contents suggest (a ``shards/`` folder planted beside whole weights is not read)."""

    form = "whole"  # or "shards"

    def save(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, directory: Path, rank: int
    ) -> dict | None:
        weights = self.full_state_dict(model)  # a collective where the weights are sharded
        if rank == 0:
            save_weights(weights, directory / WEIGHTS)
        return self.save_optimizer(model, optimizer, directory)

    def load(self, model: nn.Module, optimizer: torch.optim.Optimizer, saved: Saved) -> None:
        if saved.form == "shards":
            load_shards(model, optimizer, saved.directory, getattr(self, "group", None))
            return
        self.load_full_state_dict(model, load_weights(saved.directory / WEIGHTS))
        self.load_optimizer(model, optimizer, saved)


def load_shards(
    model: nn.Module, optimizer: torch.optim.Optimizer, directory: Path, group: Any
) -> None:
    """The weights and optimiser state of a FSDP2 checkpoint (every rank's shards, written by
    ``torch.distributed.checkpoint``), onto ``model`` as it is held here: whole, or sharded over
    any number of ranks."""
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    from rlcore.workers.files.shard_reader import load_shards_into

    weights, moments = get_state_dict(model, optimizer)
    both = {"model": weights, "optimizer": moments}
    load_shards_into(both, directory / SHARDS, group)
    set_state_dict(
        model, optimizer, model_state_dict=both["model"], optim_state_dict=both["optimizer"]
    )
