"""``training_backend: megatron``: the reasoning actor and critic trained as Megatron-core
``GPTModel``s, tensor parallel over ``megatron.tensor_parallel_size`` ranks, pipeline parallel
over ``megatron.pipeline_parallel_size`` stages of those, and data parallel over the rest of the
component's ranks, behind the ``Strategy`` seam the ``Trainer`` talks through.

- The Hugging Face model the component loads is converted into this rank's shard of its stage
  (``rlcore.models.megatron``) and wrapped in ``MegatronLM``, which takes the same keyword call
  and returns the same ``.logits`` as a transformers model, so the components' passes and losses
  (``rlcore.algorithms``) are unchanged.
- Megatron's model-parallel state is set up over the default process group (the ranks of the
  component and the components fused with it). The ranks of one model replica (its
  tensor-parallel shards of every stage) compute on the same rows: each gathers the rows the
  dispatch gave the others (``local_batch``), and the data-parallel groups split the batch.
  Counts, metrics and the gradient sum run over the data-parallel group.
- Pipeline stages: one stage cannot compute an output alone, so passes over micro-batches run
  through ``MegatronParallel.pipeline`` (Megatron's 1F1B schedule), which hands the last stage's
  output to the component's function as if it came from ``MegatronLM`` and broadcasts the
  results (log-probs, values, loss metrics) to the other stages.
- Gradients are summed over the data-parallel group once per optimiser step (in
  ``clip_grad_norm``), a tied embedding's two copies (first and last stage) sum theirs, and the
  norm counts each tensor-parallel shard once, each replicated weight (norms, the value head)
  once and the tied embedding once.
- The optimiser is torch's AdamW over this rank's shards (elementwise, so the same as over the
  whole weights); Megatron's distributed optimiser is not used.
- The weights sync and checkpoint in the Hugging Face layout (every rank gathers: a collective),
  so a checkpoint's weights load under any backend. The optimiser state checkpoints through
  Megatron's ``dist_checkpointing`` (every rank writes its shards as pieces of whole tensors),
  so it loads onto any tensor / pipeline / data parallel layout of the same model.

Megatron's model runs on CUDA devices (some of its code names the device); the configuration
refuses this backend on CPU slots. The tests run it on the CPU through tests/megatron_shim.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from rlcore.models import megatron as mg
from rlcore.workers.files.weights_file import Saved, WholeWeightsCheckpoint
from rlcore.workers.training.megatron_optimizer import (
    load_sharded_optimizer,
    save_sharded_optimizer,
)


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
    pipeline_parallel_size: int = 1
    seed: int = 0

    @classmethod
    def of(cls, section: Any, seed: int) -> MegatronOptions:
        if section is None:
            return cls(seed=seed)
        return cls(section.tensor_parallel_size, section.pipeline_parallel_size, seed)


class MegatronLM(nn.Module):
    """A converted ``GPTModel`` shard called as a transformers model is: keyword inputs with a
    left-padded attention mask, ``.logits`` out (the whole vocabulary, gathered over the
    tensor-parallel ranks; or one value per position)."""

    def __init__(self, gpt: nn.Module, hf_config: Any, value_head: bool) -> None:
        super().__init__()
        self.gpt, self.config, self.value_head = gpt, hf_config, value_head

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        use_cache: Any = None,
        logits_to_keep: int = 0,
    ) -> SimpleNamespace:
        """Megatron's rotary embeddings count positions from the first column, so each row is
        rotated left to start at its first real token (the causal mask keeps the padding that
        moves to the end out of every real token's view) and the outputs rotated back. The
        positions given are those (0 from the first real token), so they are not read.

        One pipeline stage cannot compute the outputs alone: under pipeline parallelism the
        passes run through ``MegatronParallel.pipeline``, which calls ``rotated`` and
        ``finish`` around each stage's part."""
        return self.finish(*self.last_stage(input_ids, attention_mask), logits_to_keep)

    def last_stage(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The last stage's output on the rotated rows, and each row's rotation (``rotated``):
        the whole model's pass, without pipeline stages."""
        if not (self.gpt.pre_process and self.gpt.post_process):
            raise RuntimeError("a pipeline stage's model runs through MegatronParallel.pipeline")
        rotated, lead = self.rotated(input_ids, attention_mask)
        return self.gpt(rotated, None, attention_mask=None), lead

    @staticmethod
    def rotated(
        input_ids: torch.Tensor, attention_mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The rows rotated to start at their first token, and each row's rotation."""
        if attention_mask is None:
            raise ValueError(
                "the megatron backend takes padded rows with their attention mask "
                "(packed sequences are not supported)"
            )
        width = input_ids.shape[1]
        mask = attention_mask.bool()
        lead = (~mask).long().cumprod(-1).sum(-1)  # padding columns before the first token
        trail = (~mask).flip(-1).long().cumprod(-1).sum(-1)  # and after the last
        if bool((mask.sum(-1) != (width - lead - trail).clamp(min=0)).any()):
            raise ValueError(
                "a row's tokens are not contiguous: the megatron backend reads "
                "rows of left padding, tokens, right padding"
            )
        columns = torch.arange(width, device=input_ids.device)
        return input_ids.gather(1, (columns[None] + lead[:, None]) % width), lead

    def finish(
        self, out: torch.Tensor, lead: torch.Tensor, logits_to_keep: int = 0
    ) -> SimpleNamespace:
        """What ``forward`` returns, from the last stage's output on the rotated rows."""
        if not self.value_head:
            out = mg.full_logits(out, self.config.vocab_size)
        columns = torch.arange(out.shape[1], device=out.device)
        back = ((columns[None] - lead[:, None]) % out.shape[1])[..., None]
        logits = out.gather(1, back.expand(-1, -1, out.shape[-1]))
        return SimpleNamespace(logits=logits[:, -logits_to_keep:] if logits_to_keep else logits)


class _StageOutput(MegatronLM):
    """A ``MegatronLM`` whose one pass is the last pipeline stage's output for one micro-batch,
    computed already: the loss and forward functions call their model once per micro-batch with
    its inputs, and get what ``MegatronLM`` would have returned."""

    def __init__(
        self, lm: MegatronLM, output: torch.Tensor, lead: torch.Tensor, input_ids: torch.Tensor
    ) -> None:
        super().__init__(lm.gpt, lm.config, lm.value_head)
        self.output, self.lead, self.input_ids = output, lead, input_ids
        self.calls = 0

    def last_stage(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self.calls += 1
        if self.calls > 1 or not torch.equal(input_ids, self.input_ids):
            raise RuntimeError(
                "under pipeline parallelism a micro-batch's function calls the "
                "model once, on the micro-batch's input_ids"
            )
        return self.output, self.lead


def _to(tree: Any, device: torch.device | str) -> Any:
    """``tree``'s tensors (in dicts, lists and tuples) detached and moved to ``device``."""
    if isinstance(tree, torch.Tensor):
        return tree.detach().to(device)
    if isinstance(tree, dict):
        return {k: _to(v, device) for k, v in tree.items()}
    if isinstance(tree, list | tuple):
        return type(tree)(_to(v, device) for v in tree)
    return tree


class MegatronParallel(WholeWeightsCheckpoint):
    """See the module doc. ``rank`` and ``world_size`` are the data-parallel ones (the
    ``Trainer`` splits mini-batches over them); ``group`` is the default group, which must be
    initialised (``make_strategy`` starts one of this process alone when there is none)."""

    name = "megatron"
    shards = True
    loss_scale = 1.0  # the gradients are summed over the data-parallel group, not averaged

    def load(self, model: nn.Module, optimizer: torch.optim.Optimizer, saved: Saved) -> None:
        """The whole weights, converted to this rank's shard, and the optimiser's moments from
        Megatron's own format (``load_optimizer``); FSDP2's shards are refused by name (their
        optimiser state is keyed by the transformers parameters)."""
        if saved.form == "shards":
            raise ValueError(
                f"{saved.directory}: written by the fsdp2 training backend (its shards); resume it "
                "with training_backend fsdp2, or start Megatron from its weights"
            )
        super().load(model, optimizer, saved)

    def __init__(self, device: torch.device, options: MegatronOptions) -> None:
        from megatron.core import parallel_state, tensor_parallel

        tp, pp = options.tensor_parallel_size, options.pipeline_parallel_size
        if dist.get_world_size() % (tp * pp):
            raise ValueError(
                f"megatron.tensor_parallel_size {tp} x pipeline_parallel_size {pp} "
                f"does not divide the component's {dist.get_world_size()} "
                "ranks"
            )
        if not parallel_state.model_parallel_is_initialized():
            parallel_state.initialize_model_parallel(
                tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp
            )
        else:
            have = (
                parallel_state.get_tensor_model_parallel_world_size(),
                parallel_state.get_pipeline_model_parallel_world_size(),
            )
            if have != (tp, pp):
                raise ValueError(
                    "megatron: components fused in one process share Megatron's model-parallel "
                    f"state, set up with tensor / pipeline parallel sizes {have}, not {(tp, pp)}"
                )
        if device.type == "cuda":  # the random states Megatron forks for its dropout regions
            tensor_parallel.model_parallel_cuda_manual_seed(options.seed)
        self.device, self.options = device, options
        self.group = dist.group.WORLD
        self.tp_size, self.tp_rank = tp, parallel_state.get_tensor_model_parallel_rank()
        self.tp_group = parallel_state.get_tensor_model_parallel_group()
        self.pipeline_size, self.stage = pp, parallel_state.get_pipeline_model_parallel_rank()
        self.pp_group = parallel_state.get_pipeline_model_parallel_group()
        self.last_stage = parallel_state.get_pipeline_model_parallel_last_rank()  # global rank
        # the ranks of one model replica (its tensor-parallel shards of every stage)
        self.mp_group = parallel_state.get_model_parallel_group()
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
        gpt = mg.build_gpt(hf_config, self.tp_size, dtype, value, self.pipeline_size)
        state = mg.to_megatron(
            model.state_dict(),
            hf_config,
            self.tp_rank,
            self.tp_size,
            value,
            self.stage,
            self.pipeline_size,
        )
        gpt.load_state_dict(state, strict=True)
        return MegatronLM(gpt, hf_config, value)

    def wrap(self, model: nn.Module) -> nn.Module:
        return model

    def no_sync(self, module: nn.Module) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()  # nothing is synced before clip_grad_norm

    def local_batch(self, batch: Any) -> tuple[Any, slice]:
        """The rows this rank computes on (those of every rank of its model replica: its
        tensor-parallel shards of every pipeline stage, in group rank order) and where its own
        rows lie among them."""
        replica = self.tp_size * self.pipeline_size
        if replica == 1:
            return batch, slice(None)
        parts: list[Any] = [None] * replica
        dist.all_gather_object(parts, batch.cpu(), group=self.mp_group)
        start = sum(len(part) for part in parts[: dist.get_rank(self.mp_group)])
        return torch.cat(parts).to(batch.device), slice(start, start + len(batch))

    def pipeline(
        self,
        module: MegatronLM,
        micros: list[Any],
        fn: Callable[[Any, Any], Any],
        forward_only: bool,
    ) -> list[Any]:
        """``fn(model, micro)`` of each micro-batch, run through Megatron's pipeline schedule
        (1F1B: each stage's part of the forward pass as the previous stage's activations
        arrive, the backward pass back the same way); its results (detached) on every stage.

        ``fn`` calls ``model`` once, as it calls a ``MegatronLM`` (on the last stage it gets the
        finished stage's output). Trained (``forward_only`` false): ``fn`` returns ``(loss,
        metrics)``, the loss's gradient accumulates as ``backward`` would, and the results are
        the metrics. Every rank of the model replica calls this with the same micro-batches."""
        from megatron.core.pipeline_parallel import get_forward_backward_func

        def step(data_iterator: Any, model: nn.Module) -> tuple[torch.Tensor, Callable]:
            micro = next(data_iterator)
            rotated, lead = module.rotated(micro["input_ids"], micro["attention_mask"])
            output = model(rotated, None, attention_mask=None)

            def reduce(output: torch.Tensor, non_loss_data: bool = False) -> Any:
                result = fn(_StageOutput(module, output, lead, micro["input_ids"]), micro)
                if forward_only:
                    return result
                loss, metrics = result
                # (loss, count, data): Megatron backpropagates the loss as it is (the config's
                # calculate_per_token_loss; it is already a share of the mini-batch's)
                return loss, torch.ones((), dtype=torch.int, device=loss.device), metrics

            return output, reduce

        store = get_forward_backward_func()(
            forward_step_func=step,
            data_iterator=iter(micros),
            model=module.gpt,
            num_microbatches=len(micros),
            seq_length=max(m["input_ids"].shape[1] for m in micros),
            micro_batch_size=max(len(m) for m in micros),
            forward_only=forward_only,
            collect_non_loss_data=forward_only,
        )
        results = [_to(store, "cpu") if self.stage == self.pipeline_size - 1 else None]
        dist.broadcast_object_list(results, src=self.last_stage, group=self.pp_group)
        return _to(results[0], self.device)

    def all_reduce(self, tensor: torch.Tensor, op: Any = None) -> torch.Tensor:
        if self.world_size > 1:
            dist.all_reduce(tensor, op=op or dist.ReduceOp.SUM, group=self.dp_group)
        return tensor

    def clip_grad_norm(self, model: nn.Module, max_norm: float) -> torch.Tensor:
        """Sum the gradients over the data-parallel group (and a tied embedding's two copies',
        on the first and last pipeline stages), then clip to ``max_norm`` the norm of the whole
        gradient: each split weight's shards once, each replicated weight once, the tied
        embedding once."""
        params = [p for p in model.parameters() if p.grad is not None]
        grads = [p.grad for p in params]
        if self.world_size > 1 and grads:
            flat = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat, group=self.dp_group)
            for grad, summed in zip(grads, _unflatten(flat, grads), strict=True):
                grad.copy_(summed)
        self._sum_tied_embedding_grads(model)
        split = torch.zeros((), device=self.device)
        whole = torch.zeros((), device=self.device)
        for param, grad in zip(params, grads, strict=True):
            if getattr(param, "shared", False):
                continue  # the last stage's copy of the tied embedding: counted on the first
            if getattr(param, "tensor_model_parallel", False):
                split = split + grad.float().square().sum()
            else:
                whole = whole + grad.float().square().sum()
        squares = split + (whole if self.tp_rank == 0 else torch.zeros_like(whole))
        if self.tp_size * self.pipeline_size > 1:
            dist.all_reduce(squares, group=self.mp_group)
        norm = squares.sqrt()
        scale = (max_norm / (norm + 1e-6)).clamp(max=1.0)
        for grad in grads:
            grad.mul_(scale.to(grad.dtype))
        return norm

    def _sum_tied_embedding_grads(self, model: nn.Module) -> None:
        """A tied model split into pipeline stages holds the embedding on the first stage and a
        copy as the output layer on the last: each gets the sum of both gradients, so the two
        take the same steps (Megatron's own embedding group: those two stages)."""
        from megatron.core import parallel_state

        gpt = model.gpt
        if self.pipeline_size == 1 or not gpt.share_embeddings_and_output_weights:
            return
        if not (gpt.pre_process or gpt.post_process):
            return  # a middle stage holds neither
        weight = gpt.shared_embedding_or_output_weight()
        grad = weight.grad if weight.grad is not None else torch.zeros_like(weight)
        dist.all_reduce(grad, group=parallel_state.get_embedding_group())
        weight.grad = grad

    # whole weights -----------------------------------------------------------------------------

    def _shards(self, model: nn.Module) -> list[dict[str, torch.Tensor]]:
        own = {
            k: v.detach()
            for k, v in model.gpt.state_dict().items()
            if not k.endswith("_extra_state")
        }
        if self.tp_size == 1:
            return [own]
        parts: list[Any] = [None] * self.tp_size
        dist.all_gather_object(parts, {k: v.cpu() for k, v in own.items()}, group=self.tp_group)
        return parts

    def full_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """The Hugging Face state dict (gathered over the tensor-parallel group, then the
        pipeline stages: every rank of the model replica calls this)."""
        config, value = model.config, model.value_head
        part = mg.to_hf(self._shards(model), config, value, self.stage, self.pipeline_size)
        if self.pipeline_size > 1:
            parts: list[Any] = [None] * self.pipeline_size
            dist.all_gather_object(
                parts, {k: v.cpu() for k, v in part.items()}, group=self.pp_group
            )
            part = mg.merge_stages(parts, config, value)
        return {k: v.to(self.device) for k, v in part.items()}

    def weight_tensors(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """What a weight sync sends: the whole weights in the Hugging Face layout."""
        return self.full_state_dict(model)

    def load_full_state_dict(self, model: nn.Module, state: dict[str, torch.Tensor]) -> None:
        shard = mg.to_megatron(
            {k: v.cpu() for k, v in state.items()},
            model.config,
            self.tp_rank,
            self.tp_size,
            model.value_head,
            self.stage,
            self.pipeline_size,
        )
        missing, unexpected = model.gpt.load_state_dict(shard, strict=False)
        if unexpected or [k for k in missing if not k.endswith("_extra_state")]:
            raise ValueError(
                f"the weights do not fit the model: missing {missing[:3]}, "
                f"unexpected {unexpected[:3]}"
            )

    # the optimiser state: Megatron's own sharded format (megatron_optimizer.py) ----------------

    def save_optimizer(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, directory: Path
    ) -> None:
        """Every rank's shards of the AdamW moments, as pieces of whole tensors that load onto
        any tensor / pipeline / data parallel layout of the same model."""
        save_sharded_optimizer(model, optimizer, directory)

    def load_optimizer(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, saved: Saved
    ) -> None:
        """This rank's shards of the moments ``save_optimizer`` wrote, whatever the layout that
        wrote them."""
        load_sharded_optimizer(model, optimizer, saved.directory)
