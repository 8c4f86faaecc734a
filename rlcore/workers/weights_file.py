"""Whole-model weights as one safetensors file, with tensors shared under several names kept shared.

safetensors refuses two names for one storage (a shared trunk registered as both the policy's and
the value's), so each storage is written once and the other names are listed in the file's
metadata as aliases of the first.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file


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
