"""Whole-model weights as one safetensors file, with tensors shared under several names kept shared;
and reading a trained component's weights from its checkpoint folder in either of its forms.

safetensors refuses two names for one storage (a shared trunk registered as both the policy's and
the value's), so each storage is written once and the other names are listed in the file's
metadata as aliases of the first.

A component trained with FSDP2 checkpoints as ``torch.distributed.checkpoint`` shards, every rank
its own (``SHARDS``), which load onto any number of ranks; any other as ``model.safetensors``.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

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
    save_file(unique, str(path), metadata={"aliases": json.dumps(aliases)})


def load_weights(path: Path) -> dict[str, torch.Tensor]:
    with safe_open(str(path), framework="pt") as weights:
        state = {name: weights.get_tensor(name) for name in weights.keys()}  # noqa: SIM118
        aliases = json.loads((weights.metadata() or {}).get("aliases", "{}"))
    for name, source in aliases.items():
        state[name] = state[source]
    return state


def read_trained_weights(folder: Path, model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole weights in a component's checkpoint ``folder`` (``WEIGHTS``, or the ``SHARDS``
    any number of ranks wrote, read here into tensors shaped as ``model``'s), by name."""
    if (folder / WEIGHTS).is_file():
        return load_weights(folder / WEIGHTS)
    import warnings

    import torch.distributed.checkpoint as dcp

    state = {k: torch.empty_like(v) for k, v in model.state_dict().items()}
    with warnings.catch_warnings():  # that one process reads them is the intent here
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load({"model": state}, checkpoint_id=str(folder / SHARDS), no_dist=True)
    return state
