"""Whole-model weights files: tensors shared under several names come back shared."""

import torch
from torch import nn

from rlcore.workers.files.weights_file import load_weights, save_weights


def test_shared_tensors_round_trip_and_stay_shared(tmp_path):
    trunk = nn.Linear(3, 4)
    model = nn.ModuleDict({"policy": trunk, "value": trunk, "head": nn.Linear(4, 1)})
    state = model.state_dict()
    assert state["policy.weight"].data_ptr() == state["value.weight"].data_ptr()
    save_weights(state, tmp_path / "w.safetensors")
    loaded = load_weights(tmp_path / "w.safetensors")
    assert loaded.keys() == state.keys()
    assert all(torch.equal(loaded[k], state[k]) for k in state)
    assert loaded["policy.weight"] is loaded["value.weight"]
    fresh = nn.ModuleDict({"policy": (t := nn.Linear(3, 4)), "value": t, "head": nn.Linear(4, 1)})
    fresh.load_state_dict(loaded)
    assert torch.equal(fresh["value"].weight, trunk.weight)
