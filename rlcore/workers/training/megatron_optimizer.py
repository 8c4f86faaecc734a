"""The optimiser state of ``training_backend: megatron``, in Megatron's own checkpoint format:
every rank's shards of the AdamW moments written through Megatron's ``dist_checkpointing`` into
``MEGATRON_OPTIMIZER`` as pieces of whole tensors, so they load onto any tensor / pipeline / data
parallel layout of the same model. The step count and the hyperparameters (learning rate) are the
same on every rank and kept whole.

``MegatronParallel.save_optimizer`` and ``load_optimizer`` (``megatron_strategy.py``) are these.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from rlcore.workers.files.shard_reader import check_metadata
from rlcore.workers.files.state_files import load_state, writing
from rlcore.workers.files.weights_file import MEGATRON_OPTIMIZER


def sharded_optimizer_state(
    model: nn.Module, optimizer: torch.optim.Optimizer, state: dict
) -> dict:
    """``state`` (an optimiser state dict of this rank's parameters, without ``step``) as
    Megatron's sharded state: each moment a piece of a whole tensor, named after the
    parameter's own sharded name (so a tied embedding's copies are one tensor)."""
    from megatron.core.dist_checkpointing.optimizer import (
        get_param_id_to_sharded_param_map,
        optim_state_to_sharding_state,
    )

    params = [p for group in optimizer.param_groups for p in group["params"]]
    names = get_param_id_to_sharded_param_map(model.gpt.sharded_state_dict(), params)
    optim_state_to_sharding_state(state, names)
    return state


def save_sharded_optimizer(
    model: nn.Module, optimizer: torch.optim.Optimizer, directory: Path
) -> None:
    """Every rank's shards of the AdamW moments of ``model`` (a ``MegatronLM``), written into
    ``directory / MEGATRON_OPTIMIZER`` (every rank calls this: a collective)."""
    from megatron.core import dist_checkpointing

    own = optimizer.state_dict()
    steps = {float(s["step"]) for s in own["state"].values()}
    if len(steps) > 1:
        raise RuntimeError(f"the parameters' optimiser step counts differ: {sorted(steps)}")
    moments = {i: {k: v for k, v in s.items() if k != "step"} for i, s in own["state"].items()}
    state = sharded_optimizer_state(
        model, optimizer, {"state": moments, "param_groups": own["param_groups"]}
    )
    hyper = [{k: v for k, v in g.items() if k != "params"} for g in own["param_groups"]]
    folder = directory / MEGATRON_OPTIMIZER
    folder.mkdir(parents=True, exist_ok=True)
    with writing(folder):
        dist_checkpointing.save(
            {
                "optimizer": state,
                "step": steps.pop() if steps else None,
                "hyperparameters": hyper,
            },
            str(folder),
        )


def load_sharded_optimizer(
    model: nn.Module, optimizer: torch.optim.Optimizer, directory: Path
) -> None:
    """This rank's shards of the moments ``save_sharded_optimizer`` wrote, whatever the layout
    that wrote them; a checkpoint of another backend (its optimiser state whole) is refused."""
    from megatron.core import dist_checkpointing

    folder = directory / MEGATRON_OPTIMIZER
    if not folder.is_dir():
        raise ValueError(
            f"{directory}: written by a training backend other than megatron "
            "(its optimiser state is whole, not Megatron's shards); resume it "
            "with that backend, or start Megatron from its weights"
        )
    params = [p for group in optimizer.param_groups for p in group["params"]]
    current = optimizer.state_dict()
    template = sharded_optimizer_state(
        model,
        optimizer,
        {
            "state": {
                i: {"exp_avg": torch.empty_like(p), "exp_avg_sq": torch.empty_like(p)}
                for i, p in enumerate(params)
            },
            "param_groups": current["param_groups"],
        },
    )
    check_metadata(folder)  # Megatron unpickles it with pickle: nothing else may be in it
    # Megatron's torch.load of common.pt leaves weights_only to the environment
    # (TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD turns it off): read it as plain data first
    if (folder / "common.pt").is_file():
        load_state(folder / "common.pt")
    loaded = dist_checkpointing.load(
        {"optimizer": template, "step": None, "hyperparameters": None}, str(folder)
    )
    groups = [
        {**group, **hyper}
        for group, hyper in zip(current["param_groups"], loaded["hyperparameters"], strict=True)
    ]
    state = {}
    if loaded["step"] is not None:
        step = torch.tensor(loaded["step"], dtype=torch.float32)
        state = {
            i: {"step": step.clone(), **moments}
            for i, moments in loaded["optimizer"]["state"].items()
        }
    optimizer.load_state_dict({"state": state, "param_groups": groups})
