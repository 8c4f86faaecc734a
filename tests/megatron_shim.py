"""Megatron-core on the CPU, for tests only.

megatron-core 0.16.1's model runs on CUDA devices: a few of its code paths name the device
outright. Redirected to the CPU, its local-spec GPT model runs forward and backward with gloo
process groups, which is how the conversion and tensor-parallel tests run on CI. What is
redirected, and why each is safe here:

- ``torch.cuda.current_device()`` returns the CPU device: Megatron allocates buffers (rotary
  frequencies, gathers of tensor-parallel outputs) on "the current CUDA device".
- ``get_default_causal_mask`` builds its mask on the CPU (it is written with ``device="cuda"``).
- ``CudaRNGStatesTracker.fork`` does not swap CUDA random states: it guards dropout, and the
  models here have none (dropout 0, as rlcore's PPO needs).
- ``torch.cuda.synchronize()`` does nothing: the pipeline's point-to-point exchange calls it
  after its sends and receives, which gloo completes before returning.
- ``Tensor.cuda()`` returns the tensor itself: building a tied model's last pipeline stage
  moves its copy of the embedding to "the" GPU before summing it with the first stage's.
- The pipeline schedules' token counter, made with ``device="cuda"``, is made on the CPU (the
  schedules module sees a ``torch`` whose ``zeros`` maps that device to the CPU).

Megatron's own optimiser needs CUDA as well; the tests step torch's AdamW on each rank's
shards, which is elementwise and so the same as on the whole weights.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import torch


def _causal_mask(length: int) -> torch.Tensor:
    return torch.triu(torch.ones(length, length), diagonal=1).bool()


class _TorchZerosOnCPU:
    """``torch`` as the pipeline schedules module sees it in tests: ``zeros(device="cuda")``
    makes its tensor on the CPU; everything else is torch's own."""

    def __getattr__(self, name: str) -> object:
        return getattr(torch, name)

    @staticmethod
    def zeros(*args: object, device: object = None, **kwargs: object) -> torch.Tensor:
        return torch.zeros(*args, device="cpu" if device == "cuda" else device, **kwargs)


@contextlib.contextmanager
def megatron_on_cpu() -> Iterator[None]:
    """Within the block, Megatron's hard-coded CUDA calls go to the CPU (see the module doc)."""
    from megatron.core.pipeline_parallel import schedules
    from megatron.core.tensor_parallel import random as tp_random

    saved: list[tuple[object, str, object]] = []

    def patch(owner: object, name: str, value: object) -> None:
        saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    patch(torch.cuda, "current_device", lambda: torch.device("cpu"))
    for name, module in list(sys.modules.items()):  # each importer holds its own reference
        if name.startswith("megatron.") and hasattr(module, "get_default_causal_mask"):
            patch(module, "get_default_causal_mask", _causal_mask)
    patch(tp_random.CudaRNGStatesTracker, "fork", lambda self, name=None: contextlib.nullcontext())
    patch(torch.cuda, "synchronize", lambda device=None: None)
    patch(torch.Tensor, "cuda", lambda self, *args, **kwargs: self)
    patch(schedules, "torch", _TorchZerosOnCPU())
    try:
        yield
    finally:
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)
