"""``Trainer``: the one data-parallel training loop every trained component uses.

It owns the model (wrapped by a ``Strategy``), the optimiser and its learning-rate schedule (both
from the component's ``optim`` section; the schedule a ``torch.optim.lr_scheduler.LambdaLR``),
the mini-batch shuffle and the optimiser step with gradient clipping; a component brings only
its loss. ``fit`` runs ``epochs`` passes over a batch,
each over shuffled mini-batches of ``mini_batch_size`` samples (global across ranks), each
mini-batch one optimiser step accumulated over micro-batches of ``micro_batch_size`` samples (per
rank, for memory only).

Why the gradient does not depend on the micro-batch size or the number of ranks: every loss is
aggregated with the *global* mini-batch's token and sequence counts (computed here and summed over
ranks), so the micro-batch losses of all ranks add up to the mini-batch loss; each rank scales its
loss by the strategy's ``loss_scale`` (DDP averages, so the world size) before ``backward``.

Metrics stay tensors until the update ends: one host transfer per ``fit``, plus one per optimiser
step to skip a non-finite gradient instead of poisoning the optimiser. A metric named in
``additive`` is a share of the mini-batch loss (summed over micro-batches and ranks); any other is
averaged over micro-batches and ranks. Each is then averaged over the optimiser steps.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict
from torch import nn

from rlcore.config.sections import OptimConfig
from rlcore.scheduler.dispatch import Dispatch, dispatch
from rlcore.workers.files.state_files import load_state, save_state
from rlcore.workers.files.weights_file import Saved, recorded_form
from rlcore.workers.training.strategy import FsdpOptions, Strategy, make_strategy

LossFn = Callable[[nn.Module, TensorDict, dict[str, int]], tuple[torch.Tensor, dict[str, Any]]]


@dataclass(frozen=True)
class UpdateSizes:
    epochs: int
    mini_batch_size: int  # samples per optimiser step, all ranks together
    micro_batch_size: int | None  # samples per forward/backward on one rank; None = the mini-batch
    shuffle: bool = True  # the samples between mini-batches, each epoch; False: in order


def build_optimizer(optim: OptimConfig, params: list[nn.Parameter]) -> torch.optim.Optimizer:
    """``optim.name``'s optimiser over ``params``. Fused: one kernel over all parameters (on CPU
    the default is a loop per tensor; measured: a CartPole update 10% faster, the tiny model's
    two PPO updates 0.110 -> 0.101 s an iteration)."""
    kind = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[optim.name]
    return kind(params, lr=optim.lr, eps=optim.eps, weight_decay=optim.weight_decay, fused=True)


def decay_factor(decay: str, done: int, total: int) -> float:
    """The learning rate's factor after ``done`` of ``total`` updates: constant 1, linear
    ``1 - done / total``, cosine ``(1 + cos(pi done / total)) / 2``."""
    if decay == "constant":
        return 1.0
    progress = min(done, total) / total
    if decay == "linear":
        return 1.0 - progress
    return 0.5 * (1.0 + math.cos(math.pi * progress))


class NonFiniteError(RuntimeError):
    """More consecutive optimiser steps with a NaN or infinite gradient than allowed."""


class Trainer:
    """See the module docstring.

    Args:
        ctx: the component's ``WorkerContext`` (rank, world size, group, device), or None.
        optim: the optimiser and its schedule (``build_optimizer``; a ``LambdaLR`` of
            ``_lr_factor``: the warm-up counts optimiser steps, the decay updates) and the
            gradient clip (``optim.max_grad_norm``; None: no clipping).
        updates: the updates (``fit`` calls) of the run, over which ``optim.decay`` falls.
        seed: seeds the mini-batch shuffle (the same on every rank: each shuffles its own rows).
        backend: the training backend (``strategy.make_strategy``): torch (single or DDP),
            fsdp2 with ``fsdp``'s mixed precision and offload, or megatron with ``megatron``'s
            ``MegatronOptions``.
        split: forms a mini-batch's micro-batches (row indices of each, e.g. by a token budget)
            instead of ``sizes.micro_batch_size`` rows each; with several ranks, every rank
            takes as many as the rank that needs the most (FSDP2 gathers weights per pass).
        cut: applied to each micro-batch before its pass (cutting columns of padding).
    """

    def __init__(
        self,
        ctx: Any,
        model: nn.Module,
        *,
        optim: OptimConfig,
        updates: int,
        sizes: UpdateSizes,
        seed: int,
        additive: frozenset[str] = frozenset(),
        backend: str = "torch",
        fsdp: FsdpOptions | None = None,
        megatron: Any = None,
        max_skipped_steps: int | None = None,
        split: Callable[[TensorDict], list[torch.Tensor]] | None = None,
        cut: Callable[[TensorDict], TensorDict] | None = None,
        sequence_parallel: int = 1,
    ) -> None:
        self.strategy: Strategy = make_strategy(ctx, backend, fsdp, megatron, sequence_parallel)
        self.component = getattr(ctx, "component", "model")
        self.global_rank = getattr(ctx, "rank", 0)  # names this rank's files
        self.max_skipped_steps = max_skipped_steps
        self.device = ctx.torch_device if ctx is not None else torch.device("cpu")
        self.model = self.strategy.convert(model).to(self.device)
        self.model.train()
        self.module = self.strategy.wrap(self.model)
        # the trained parameters only (a LoRA model's base is frozen)
        self.optimizer = build_optimizer(
            optim, [p for p in self.model.parameters() if p.requires_grad]
        )
        self.optim, self.total_updates = optim, max(1, updates)
        self.updates = 0  # fits done: the decay's clock (the warm-up's is the optimiser step)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_factor)
        self.sizes = sizes
        self.max_grad_norm = math.inf if optim.max_grad_norm is None else optim.max_grad_norm
        self.additive = additive
        self.split, self.cut = split, cut
        self.shuffle = torch.Generator().manual_seed(seed)
        self.steps = 0
        self.skipped_steps = 0
        self.skipped_in_a_row = 0

    def _lr_factor(self, step: int) -> float:
        """The learning rate over ``optim.lr`` for optimiser step ``step`` (from 0): the warm-up's
        ``(step + 1) / warmup_steps`` up to 1, times the decay at the updates done so far."""
        warmup = self.optim.warmup_steps
        rise = min(1.0, (step + 1) / warmup) if warmup else 1.0
        return rise * decay_factor(self.optim.decay, self.updates, self.total_updates)

    @property
    def rank(self) -> int:
        return self.strategy.rank

    @property
    def world_size(self) -> int:
        return self.strategy.world_size

    @property
    def shards(self) -> bool:
        """The module cannot generate as a transformers model on one rank alone (``Strategy
        .shards``), so a rollout needs its own whole copy."""
        return self.strategy.shards

    # the update --------------------------------------------------------------------------------

    def fit(self, batch: TensorDict, loss_fn: LossFn, mask_key: str) -> dict[str, float]:
        """``epochs`` passes of optimiser steps over this rank's ``batch`` (see the module doc).

        ``loss_fn(module, micro_batch, counts)`` returns this micro-batch's share of the
        mini-batch loss and its metrics (0-d tensors); ``batch[mask_key]`` is the ``[B]`` or
        ``[B, T]`` 0/1 mask of the samples (tokens) that count.
        """
        batch, _ = self.strategy.local_batch(batch)
        size = batch.batch_size[0]
        mini = self.sizes.mini_batch_size // self.world_size
        micro = self.sizes.micro_batch_size or mini
        batch = batch.to(self.device)
        lr = self.optimizer.param_groups[0]["lr"]
        names: list[str] | None = None
        rows, norms = [], []
        # One mini-batch per epoch: its counts are the whole batch's, the same every epoch.
        counts = self._global_counts(batch[mask_key], mini) if mini == size else None
        # Shuffle once per epoch (unless told not to); mini- and micro-batches are then slices.
        # A lone mini-batch in one pass needs no shuffle: its gradient is a sum, whatever the
        # order.
        in_order = (mini == size and micro >= mini) or not self.sizes.shuffle
        for epoch in range(self.sizes.epochs):
            shuffled = batch if in_order else batch[torch.randperm(size, generator=self.shuffle)]
            epoch_counts = counts or self._global_counts(shuffled[mask_key], mini)
            minibatches = [
                shuffled if mini == size else shuffled[start : start + mini]
                for start in range(0, size, mini)
            ]
            plans = self._micro_plans(minibatches, micro)
            for i, minibatch in enumerate(minibatches):
                step_counts = {"num_tokens": epoch_counts[i][0], "num_seqs": epoch_counts[i][1]}
                totals, names = self._accumulate(minibatch, plans[i], step_counts, loss_fn, names)
                rows.append(totals)
                last = epoch == self.sizes.epochs - 1 and i == len(minibatches) - 1
                norms.append(self._step(ends_update=last))
        table = torch.cat([torch.stack(rows), torch.stack(norms).to(rows[0])[:, None]], dim=1)
        return self._metrics(table, [*(names or []), "grad_norm"], lr)

    def _micro_plans(self, minibatches: list[TensorDict], micro: int) -> list[list[Any]]:
        """Each mini-batch's micro-batches: slices of ``micro`` rows, or ``split``'s row
        indices, as many on every rank (one reduction for all the mini-batches)."""
        if self.split is None:
            return [[slice(s, s + micro) for s in range(0, len(mb), micro)] for mb in minibatches]
        plans = [self.split(mb) for mb in minibatches]
        if self.world_size > 1:
            most = torch.tensor([len(p) for p in plans], dtype=torch.float64, device=self.device)
            most = self.strategy.all_reduce(most, op=torch.distributed.ReduceOp.MAX)
            plans = [_in_parts(p, int(n)) for p, n in zip(plans, most.tolist(), strict=True)]
        return plans

    def _accumulate(self, minibatch, plan, counts, loss_fn, names):
        """One mini-batch's gradient, summed over its micro-batches; its metrics as a tensor."""
        self.optimizer.zero_grad(set_to_none=True)
        cut = self.cut or (lambda micro: micro)
        if self.strategy.pipeline_size > 1:  # the stages run the micro-batches together
            scale = self.strategy.loss_scale

            def scaled(module, micro):
                loss, metrics = loss_fn(module, micro, counts)
                return loss * scale, metrics

            micros = [cut(minibatch[rows]) for rows in plan]
            all_metrics = self.strategy.pipeline(self.module, micros, scaled, forward_only=False)
        else:
            all_metrics = []
            for j, rows in enumerate(plan):
                last = j == len(plan) - 1
                with contextlib.nullcontext() if last else self.strategy.no_sync(self.module):
                    loss, metrics = loss_fn(self.module, cut(minibatch[rows]), counts)
                    (loss * self.strategy.loss_scale).backward()
                all_metrics.append({name: value.detach() for name, value in metrics.items()})
        sums = None
        for metrics in all_metrics:
            if names is None:
                names = list(metrics)
            # (on the trainer's device: a loss may compute a metric on the CPU)
            values = torch.stack(
                [metrics[n].detach().float().reshape(()).to(self.device) for n in names]
            )
            sums = values if sums is None else sums + values
        share = torch.tensor([n in self.additive for n in names], device=sums.device)
        return torch.where(share, sums, sums / len(plan)), names

    def _global_counts(self, mask: torch.Tensor, mini: int) -> list[list[int]]:
        """``[num_tokens, num_seqs]`` of each mini-batch, summed over ranks (one reduction)."""
        valid = (mask if mask.dim() == 2 else mask[:, None]).bool()
        parts = valid.reshape(-1, mini, valid.shape[-1])  # [mini-batches, mini, T]
        # count_tokens / count_seqs of each mini-batch, all at once
        counts = torch.stack([parts.sum((1, 2)), parts.any(-1).sum(-1)], dim=1).double()
        return self.strategy.all_reduce(counts).long().tolist()

    def _step(self, ends_update: bool) -> torch.Tensor:
        """One optimiser step (skipped for a non-finite gradient), then the learning rate of the
        next one: ``ends_update`` counts the update first, so the next update starts at its
        decayed rate."""
        norm = self.strategy.clip_grad_norm(self.model, self.max_grad_norm)
        if torch.isfinite(norm):
            self.optimizer.step()
            self.skipped_in_a_row = 0
        else:  # a NaN/inf gradient would poison Adam's moments for good: skip the step
            self.skipped_steps += 1
            self.skipped_in_a_row += 1
            limit = self.max_skipped_steps
            if limit is not None and self.skipped_in_a_row > limit:
                raise NonFiniteError(
                    f"{self.component}: {self.skipped_in_a_row} optimiser steps in a row had a "
                    f"NaN or infinite gradient and were skipped (runner.max_skipped_steps="
                    f"{limit}): the loss or its inputs are not finite; check the rewards and "
                    "observations, or lower the learning rate"
                )
        self.updates += ends_update
        with warnings.catch_warnings():
            # a skipped first step: torch takes the schedule to be stepped before the optimiser
            warnings.filterwarnings(
                "ignore", message="Detected call of `lr_scheduler.step", category=UserWarning
            )
            self.scheduler.step()
        self.steps += 1
        return norm.detach()

    def _metrics(self, table: torch.Tensor, names: list[str], lr: float) -> dict[str, float]:
        """Per-step metrics ``[steps, metrics]`` averaged over steps, then reduced over ranks
        (shares summed)."""
        means = table.double().mean(0)
        if self.world_size > 1:
            self.strategy.all_reduce(means)
            share = torch.tensor([n in self.additive for n in names], device=means.device)
            means = torch.where(share, means, means / self.world_size)
        result = dict(zip(names, means.tolist(), strict=True))
        result["lr"] = lr
        result["skipped_steps"] = float(self.skipped_steps)  # since the start of the run
        return result

    # weights and checkpoints -------------------------------------------------------------------

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The whole model's weights (every rank must call it: gathering may be collective)."""
        return self.strategy.full_state_dict(self.model)

    def save(self, directory: Path) -> None:
        """Every rank writes its schedule and shuffle state, and the strategy the weights and
        optimiser state (``Strategy.save``: whole weights from rank 0, or every rank's shards)."""
        directory.mkdir(parents=True, exist_ok=True)
        state: dict[str, Any] = {
            "scheduler": self.scheduler.state_dict(),
            "updates": self.updates,
            "shuffle": self.shuffle.get_state(),
            "steps": self.steps,
            "skipped_steps": self.skipped_steps,
            "optimizer": self.strategy.save(
                self.model, self.optimizer, directory, self.global_rank
            ),
            "form": self.strategy.form,
        }
        save_state(state, directory / f"trainer_rank{self.global_rank}.pt")

    def load(self, directory: Path) -> None:
        """What ``save`` wrote, under any strategy that can read it (``Strategy.load``); this
        rank's own ``trainer_rank`` file, so as many ranks as wrote it."""
        state = load_state(directory / f"trainer_rank{self.global_rank}.pt")
        form = recorded_form(directory, state)  # never the one the folders suggest
        saved = Saved(directory, state.get("optimizer"), form)
        self.strategy.load(self.model, self.optimizer, saved)
        # (a checkpoint of rlcore 0.1 counted no updates, and had no scheduler at a constant
        # rate: its warm-up-free schedules restart from the same rate)
        self.updates = state.get("updates", 0)
        if state["scheduler"] is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        self.shuffle.set_state(state["shuffle"])
        self.steps, self.skipped_steps = state["steps"], state["skipped_steps"]


def _in_parts(parts: list[torch.Tensor], count: int) -> list[torch.Tensor]:
    """``parts`` (row indices) split further, the largest in halves first, into ``count``."""
    parts = list(parts)
    while len(parts) < count:
        largest = max(range(len(parts)), key=lambda i: len(parts[i]))
        rows = parts.pop(largest)
        if len(rows) < 2:
            raise ValueError(f"cannot split {len(parts) + 1} micro-batches into {count}")
        half = len(rows) // 2
        parts[largest:largest] = [rows[:half], rows[half:]]
    return parts


class TrainedComponent:
    """What every component that trains through a ``Trainer`` (``self.trainer``) exposes: its
    weights, whole and as held, for the weight sync, and its checkpoint folder (see
    ``Trainer.save``)."""

    trainer: Trainer

    def weights(self) -> dict[str, torch.Tensor]:
        """The whole weights (gathered under FSDP2: every rank calls it)."""
        return self.trainer.full_state_dict()

    def weight_tensors(self) -> dict[str, torch.Tensor]:
        """The model's own tensors, nothing gathered (``DTensor`` shards under FSDP2): what a
        weight sync gathers a bucket at a time (``weight_buckets.py``); under Megatron the
        whole weights in the transformers layout (gathered: every rank calls it)."""
        return self.trainer.strategy.weight_tensors(self.trainer.model)

    @dispatch(Dispatch.ALL)
    def save_checkpoint(self, directory: str) -> None:
        self.trainer.save(Path(directory))

    @dispatch(Dispatch.ALL)
    def load_checkpoint(self, directory: str) -> None:
        self.trainer.load(Path(directory))
