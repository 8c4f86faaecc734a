"""A tiny reasoning config and model shared by the reasoning tests (built once per session)."""

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from rlcore.config import load_config
from rlcore.config.schema import ReasoningConfig
from rlcore.scheduler.worker import WorkerContext

# A component alone in this process, as the driver builds it for a one-process plan.
SOLO = WorkerContext(
    component="test", rank=0, world_size=1, local_rank=0, node=0, devices=(0,), device="cpu"
)

# Small enough that a PPO iteration takes well under a second on one core.
TINY = [
    "actor.model.tiny.hidden_size=32",
    "actor.model.tiny.num_layers=1",
    "actor.model.tiny.num_heads=2",
    "actor.model.tiny.intermediate_size=64",
    "data.synthetic.num_train=512",
    "data.synthetic.num_val=16",
    "data.train_batch_size=8",
    "actor.ppo_mini_batch_size=4",
    "actor.ppo_micro_batch_size=2",
    "warmup.steps=5",
    "runner.total_iterations=2",
    "runner.val_every=0",
    "runner.progress=false",
    "runner.torch_threads=1",  # tests run beside each other (2 pytest workers on 2 cores)
    "logger.tensorboard=false",
]


def tiny_config(cache: Path, output: Path, *overrides: str) -> ReasoningConfig:
    return load_config(
        "reasoning/tiny_arith_ppo",
        [*TINY, f"warmup.cache_dir={cache}", f"runner.output_dir={output}", *overrides],
    )


def unchecked(config: Any, changes: dict[str, Any]) -> Any:
    """``config`` with ``changes`` (dotted paths) in place, not validated again: for a test that
    runs a component with what the config checks refuse on this machine (rollout.backend sglang
    with no GPU and no sglang: the adapter runs against a fake engine). Otherwise use
    ``rlcore.config.replace_keys``, which validates."""
    for path, value in changes.items():
        config = _replaced(config, path.split("."), value)
    return config


def _replaced(section: Any, path: list[str], value: Any) -> Any:
    head, *rest = path
    inner = _replaced(getattr(section, head), rest, value) if rest else value
    return dataclasses.replace(section, **{head: inner})


def once(*overrides: str) -> list[str]:
    """``overrides`` with each key given once, the last value kept (as a command line would
    keep it, without its line on stderr; a test layers its own values over ``TINY``)."""
    last = {o.split("=", 1)[0]: o for o in overrides}
    return list(last.values())


def resumed_at_two(cache: Path, output: Path, *overrides: str) -> Any:
    """The runner of a run in ``output/cut`` resuming the iteration-2 checkpoint of the run
    ``output/full`` (3 iterations, checkpointed every one) as if it had stopped there; not run."""
    from rlcore.placement import plan_for_config
    from rlcore.runners.supervisor import build_runner

    checkpoint = "checkpoints/iter_000002"
    shutil.copytree(output / "full" / checkpoint, output / "cut" / checkpoint)
    resumed = tiny_config(
        cache,
        output,
        *overrides,
        "runner.total_iterations=3",
        f"runner.resume_dir={output / 'cut'}",
    )
    return build_runner(resumed, plan_for_config(resumed))


def assert_resumed_like_unbroken(output: Path, names: tuple[str, ...] = ("actor", "critic")):
    """The resumed run's (``resumed_at_two``) final weights equal the unbroken run's, bit for
    bit, and differ from the first iteration's (they trained)."""
    for name in names:
        full, resumed, start = (
            load_file(output / run / f"checkpoints/iter_00000{i}" / name / "model.safetensors")
            for run, i in (("full", 3), ("cut", 3), ("full", 1))
        )
        assert full.keys() == resumed.keys()
        assert any(not torch.equal(full[k], start[k]) for k in full)
        for key in full:
            assert torch.equal(full[key], resumed[key]), f"{name}.{key} differs after resuming"
