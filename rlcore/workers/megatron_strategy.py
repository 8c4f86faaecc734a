"""``training_backend: megatron``: the reasoning actor and critic trained as Megatron-core
``GPTModel``s, tensor parallel over ``megatron.tensor_parallel_size`` of the component's ranks
and data parallel over the rest, behind the ``Strategy`` seam the ``Trainer`` talks through.

- The Hugging Face model the component loads is converted into this rank's shard
  (``rlcore.models.megatron``) and wrapped in ``MegatronLM``, which takes the same keyword call
  and returns the same ``.logits`` as a transformers model, so the components' passes and losses
  (``rlcore.algorithms``) are unchanged.
- Megatron's model-parallel state is set up over the default process group (the ranks of the
  component and the components fused with it). Ranks of one tensor-parallel group compute on the
  same rows: each gathers the rows the dispatch gave the others (``local_batch``), and the
  data-parallel groups split the batch. Counts, metrics and the gradient sum run over the
  data-parallel group.
- Gradients are summed over the data-parallel group once per optimiser step (in
  ``clip_grad_norm``), and the norm counts each tensor-parallel shard once and each replicated
  weight (norms, the value head) once.
- The optimiser is torch's AdamW over this rank's shards (elementwise, so the same as over the
  whole weights); Megatron's distributed optimiser is not used.
- The weights sync and checkpoint in the Hugging Face layout (every rank gathers: a collective),
  so a checkpoint loads under any backend; each rank keeps its own optimiser shard.

Megatron's model runs on CUDA devices (some of its code names the device); the configuration
refuses this backend on CPU slots. The tests run it on the CPU through tests/megatron_shim.py.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from rlcore.models import megatron as mg


def _unflatten(flat: torch.Tensor, like: list[torch.Tensor]) -> list[torch.Tensor]:
    out, start = [], 0
    for tensor in like:
        out.append(flat[start : start + tensor.numel()].view_as(tensor))
        start += tensor.numel()
    return out


@dataclass(frozen=True)
class MegatronOptions:
    """The ``megatron`` config section, as the strategy reads it."""

    tensor_parallel_size: int = 1
    seed: int = 0

    @classmethod
    def of(cls, section: Any, seed: int) -> MegatronOptions:
        return cls(section.tensor_parallel_size, seed) if section is not None else cls(seed=seed)


class MegatronLM(nn.Module):
    """A converted ``GPTModel`` shard called as a transformers model is: keyword inputs with a
    left-padded attention mask, ``.logits`` out (the whole vocabulary, gathered over the
    tensor-parallel ranks; or one value per position)."""

    def __init__(self, gpt: nn.Module, hf_config: Any, value_head: bool) -> None:
        super().__init__()
        self.gpt, self.config, self.value_head = gpt, hf_config, value_head

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, use_cache: Any = None,
                logits_to_keep: int = 0) -> SimpleNamespace:  # fmt: skip
        """Megatron's rotary embeddings count positions from the first column, so each row is
        rotated left to start at its first real token (the causal mask keeps the padding that
        moves to the end out of every real token's view) and the outputs rotated back. The
        positions given are those (0 from the first real token), so they are not read."""
        if attention_mask is None:
            raise ValueError("the megatron backend takes padded rows with their attention mask "
                             "(packed sequences are not supported)")  # fmt: skip
        width = input_ids.shape[1]
        mask = attention_mask.bool()
        lead = (~mask).long().cumprod(-1).sum(-1)  # padding columns before the first token
        trail = (~mask).flip(-1).long().cumprod(-1).sum(-1)  # and after the last
        if bool((mask.sum(-1) != (width - lead - trail).clamp(min=0)).any()):
            raise ValueError("a row's tokens are not contiguous: the megatron backend reads "
                             "rows of left padding, tokens, right padding")  # fmt: skip
        columns = torch.arange(width, device=input_ids.device)
        rotated = (columns[None] + lead[:, None]) % width
        out = self.gpt(input_ids.gather(1, rotated), None, attention_mask=None)
        if not self.value_head:
            out = mg.full_logits(out, self.config.vocab_size)
        back = ((columns[None] - lead[:, None]) % width)[..., None].expand(-1, -1, out.shape[-1])
        logits = out.gather(1, back)
        return SimpleNamespace(logits=logits[:, -logits_to_keep:] if logits_to_keep else logits)


class MegatronParallel:
    """See the module doc. ``rank`` and ``world_size`` are the data-parallel ones (the
    ``Trainer`` splits mini-batches over them); ``group`` is the default group, which must be
    initialised (``make_strategy`` starts one of this process alone when there is none)."""

    name = "megatron"
    loss_scale = 1.0  # the gradients are summed over the data-parallel group, not averaged

    def __init__(self, device: torch.device, options: MegatronOptions) -> None:
        from megatron.core import parallel_state, tensor_parallel

        tp = options.tensor_parallel_size
        if dist.get_world_size() % tp:
            raise ValueError(f"megatron.tensor_parallel_size {tp} does not divide the "
                             f"component's {dist.get_world_size()} ranks")  # fmt: skip
        if not parallel_state.model_parallel_is_initialized():
            parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp)
        elif parallel_state.get_tensor_model_parallel_world_size() != tp:
            raise ValueError(
                "megatron.tensor_parallel_size: components fused in one process share Megatron's "
                f"model-parallel state, set up with size "
                f"{parallel_state.get_tensor_model_parallel_world_size()}, not {tp}"
            )
        if device.type == "cuda":  # the random states Megatron forks for its dropout regions
            tensor_parallel.model_parallel_cuda_manual_seed(options.seed)
        self.device, self.options = device, options
        self.group = dist.group.WORLD
        self.tp_size, self.tp_rank = tp, parallel_state.get_tensor_model_parallel_rank()
        self.tp_group = parallel_state.get_tensor_model_parallel_group()
        self.dp_group = parallel_state.get_data_parallel_group()
        self.rank = parallel_state.get_data_parallel_rank()
        self.world_size = parallel_state.get_data_parallel_world_size()

    # the model ---------------------------------------------------------------------------------

    def convert(self, model: nn.Module) -> nn.Module:
        """This rank's ``MegatronLM`` from a transformers causal LM or token-classification
        value model (its weights converted; the transformers model is then dropped)."""
        hf_config = model.config
        mg.check_convertible(hf_config, "training_backend megatron")
        value = hasattr(model, "score")
        dtype = next(model.parameters()).dtype
        gpt = mg.build_gpt(hf_config, self.tp_size, dtype, value_head=value)
        state = mg.to_megatron(model.state_dict(), hf_config, self.tp_rank, self.tp_size, value)
        gpt.load_state_dict(state, strict=True)
        return MegatronLM(gpt, hf_config, value)

    def wrap(self, model: nn.Module) -> nn.Module:
        return model

    def no_sync(self, module: nn.Module) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()  # nothing is synced before clip_grad_norm

    def local_batch(self, batch: Any) -> tuple[Any, slice]:
        """The rows this rank computes on (those of its whole tensor-parallel group, in rank
        order) and where its own rows lie among them."""
        if self.tp_size == 1:
            return batch, slice(None)
        parts: list[Any] = [None] * self.tp_size
        dist.all_gather_object(parts, batch.cpu(), group=self.tp_group)
        start = sum(len(part) for part in parts[: self.tp_rank])
        return torch.cat(parts).to(batch.device), slice(start, start + len(batch))

    def all_reduce(self, tensor: torch.Tensor, op: Any = None) -> torch.Tensor:
        if self.world_size > 1:
            dist.all_reduce(tensor, op=op or dist.ReduceOp.SUM, group=self.dp_group)
        return tensor

    def clip_grad_norm(self, model: nn.Module, max_norm: float) -> torch.Tensor:
        """Sum the gradients over the data-parallel group, then clip to ``max_norm`` the norm of
        the whole gradient: each split weight's shards once, each replicated weight once."""
        params = [p for p in model.parameters() if p.grad is not None]
        grads = [p.grad for p in params]
        if self.world_size > 1 and grads:
            flat = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat, group=self.dp_group)
            for grad, summed in zip(grads, _unflatten(flat, grads), strict=True):
                grad.copy_(summed)
        split = torch.zeros((), device=self.device)
        whole = torch.zeros((), device=self.device)
        for param, grad in zip(params, grads, strict=True):
            if getattr(param, "tensor_model_parallel", False):
                split = split + grad.float().square().sum()
            else:
                whole = whole + grad.float().square().sum()
        squares = split + (whole if self.tp_rank == 0 else torch.zeros_like(whole))
        if self.tp_size > 1:
            dist.all_reduce(squares, group=self.tp_group)
        norm = squares.sqrt()
        scale = (max_norm / (norm + 1e-6)).clamp(max=1.0)
        for grad in grads:
            grad.mul_(scale.to(grad.dtype))
        return norm

    # whole weights -----------------------------------------------------------------------------

    def _shards(self, model: nn.Module) -> list[dict[str, torch.Tensor]]:
        own = {k: v.detach() for k, v in model.gpt.state_dict().items() if not k.endswith(
            "_extra_state")}  # fmt: skip
        if self.tp_size == 1:
            return [own]
        parts: list[Any] = [None] * self.tp_size
        dist.all_gather_object(parts, {k: v.cpu() for k, v in own.items()}, group=self.tp_group)
        return parts

    def full_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """The Hugging Face state dict (gathered over the tensor-parallel group: every rank of it
        calls this)."""
        whole = mg.to_hf(self._shards(model), model.config, model.value_head)
        return {k: v.to(self.device) for k, v in whole.items()}

    def weight_tensors(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """What a weight sync sends: the whole weights in the Hugging Face layout."""
        return self.full_state_dict(model)

    def load_full_state_dict(self, model: nn.Module, state: dict[str, torch.Tensor]) -> None:
        shard = mg.to_megatron({k: v.cpu() for k, v in state.items()}, model.config,
                               self.tp_rank, self.tp_size, model.value_head)  # fmt: skip
        missing, unexpected = model.gpt.load_state_dict(shard, strict=False)
        if unexpected or [k for k in missing if not k.endswith("_extra_state")]:
            raise ValueError(f"the weights do not fit the model: missing {missing[:3]}, "
                             f"unexpected {unexpected[:3]}")  # fmt: skip

    def optimizer_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
        """This rank's own optimiser state (its shards'): it loads onto the same layout."""
        return optimizer.state_dict()

    def load_optimizer_state(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict
    ) -> None:
        optimizer.load_state_dict(state)
