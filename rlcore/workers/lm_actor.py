"""The language-model training components: ``LMActor`` (policy), ``LMCritic`` (separate value
model) and ``LMReference`` (frozen initial policy).

Updates follow verl's recipe: ``ppo_epochs`` passes, each over mini-batches of
``ppo_mini_batch_size`` prompts (x ``group_size`` responses), each mini-batch one optimiser step
accumulated over micro-batches of ``ppo_micro_batch_size`` responses. Losses aggregate with the
mini-batch's *global* token and sequence counts (all-reduced across ranks), and each rank scales
its loss by the world size before DDP averages: so neither the micro-batch size nor the number
of ranks changes the gradient of a mini-batch (``tests/workers/test_lm_actor.py`` pins both).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from rlcore.algorithms import agg_loss, count_seqs, count_tokens, get_policy_loss_fn, kl_penalty
from rlcore.algorithms import value_loss as clipped_value_loss
from rlcore.config.schema import ReasoningConfig
from rlcore.config.schema_reasoning import LMOptimConfig
from rlcore.models.lm import load_causal_lm, load_value_model
from rlcore.workers.lm_batch import (
    Batch,
    entropy,
    micro_batches,
    response_logits,
    select,
    token_log_probs,
)


class _Trainer:
    """What actor and critic share: the (DDP-wrapped) model, AdamW, global counts, stepping."""

    def __init__(self, ctx: Any, config: ReasoningConfig, model: torch.nn.Module,
                 optim: LMOptimConfig, update: Any, seed: int) -> None:  # fmt: skip
        self.config = config
        self.group = getattr(ctx, "group", None)
        self.world_size = getattr(ctx, "world_size", 1)
        self.rank = getattr(ctx, "rank", 0)
        self.device = ctx.torch_device if ctx is not None else torch.device("cpu")
        if ctx is not None:
            torch.set_num_threads(config.runner.torch_threads)
        self.model = model.to(self.device)
        self.model.train()
        # Several ranks train data-parallel with DDP (FSDP2 sharding is not built yet).
        if self.world_size > 1:
            self.trained = torch.nn.parallel.DistributedDataParallel(
                self.model, process_group=self.group
            )
        else:
            self.trained = self.model
        self.optim_config = optim
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=optim.lr, weight_decay=optim.weight_decay
        )
        self.steps = 0
        self.update_sizes = update
        self.shuffle = torch.Generator().manual_seed(seed)

    def _sum(self, values: list[float]) -> list[float]:
        if self.world_size == 1:
            return values
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor, group=self.group)
        return tensor.tolist()

    def _step(self) -> float:
        optim = self.optim_config
        if optim.lr_warmup_steps:
            scale = min(1.0, (self.steps + 1) / optim.lr_warmup_steps)
            for group in self.optimizer.param_groups:
                group["lr"] = optim.lr * scale
        limit = optim.max_grad_norm if optim.max_grad_norm is not None else math.inf
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), limit)
        if torch.isfinite(norm):  # a non-finite gradient skips the step instead of poisoning Adam
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.steps += 1
        return float(norm)

    def _mini_batches(self, batch: Batch) -> list[Batch]:
        """This rank's share of each shuffled mini-batch, for every epoch (every rank shuffles
        its own rows with the same seed)."""
        size = len(batch["responses"])
        group = self.config.algorithm.group_size
        mini = self.update_sizes.ppo_mini_batch_size * group // self.world_size
        out = []
        for _ in range(self.update_sizes.ppo_epochs):
            order = torch.randperm(size, generator=self.shuffle)
            out += [select(batch, order[s : s + mini]) for s in range(0, size, mini)]
        return out

    def _counts(self, mask: torch.Tensor) -> dict[str, int]:
        tokens, seqs = self._sum([count_tokens(mask), count_seqs(mask)])
        return {"num_tokens": int(tokens), "num_seqs": int(seqs)}

    def _micro(self, mini: Batch) -> list[Batch]:
        size = self.update_sizes.ppo_micro_batch_size or len(mini["responses"])
        return micro_batches(mini, size)

    def weights(self) -> dict[str, torch.Tensor]:
        return dict(self.model.state_dict())

    # Checkpoints: DDP keeps every rank's weights and optimiser identical, so rank 0 writes them
    # and every rank reads them back (the folder must be shared storage on a multi-node cluster).

    def save(self, directory: str, name: str) -> None:
        if self.rank:
            return
        from safetensors.torch import save_model

        save_model(self.model, str(Path(directory) / f"{name}.safetensors"))
        state = {"optimizer": self.optimizer.state_dict(), "shuffle": self.shuffle.get_state(),
                 "steps": self.steps}  # fmt: skip
        torch.save(state, Path(directory) / f"{name}_state.pt")

    def load(self, directory: str, name: str) -> None:
        from safetensors.torch import load_model

        load_model(self.model, str(Path(directory) / f"{name}.safetensors"))
        state = torch.load(Path(directory) / f"{name}_state.pt", weights_only=False)
        self.optimizer.load_state_dict(state["optimizer"])
        self.shuffle.set_state(state["shuffle"])
        self.steps = state["steps"]


class LMActor(_Trainer):
    """The policy: recomputes ``old_log_probs`` and runs PPO's update."""

    def __init__(self, ctx: Any, config: ReasoningConfig, model_dir: Path) -> None:
        model = load_causal_lm(model_dir, config.actor.model.dtype)
        super().__init__(ctx, config, model, config.actor.optim, config.actor, config.runner.seed)
        self.policy_loss = get_policy_loss_fn(config.algorithm.policy_loss)
        self.temperature = config.rollout.temperature

    def _logits(self, batch: Batch, module: Any = None) -> torch.Tensor:
        batch = {
            k: v.to(self.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()
        }
        logits = response_logits(module or self.model, batch, batch["responses"].shape[1])
        return logits / self.temperature  # the distribution the sampler drew from

    @torch.no_grad()
    def compute_log_probs(self, batch: Batch) -> torch.Tensor:
        size = self.update_sizes.ppo_micro_batch_size or len(batch["responses"])
        parts = [
            token_log_probs(self._logits(m), m["responses"].to(self.device)).cpu()
            for m in micro_batches(batch, size)
        ]
        return torch.cat(parts)

    def update(self, batch: Batch) -> dict[str, float]:
        stats: dict[str, list[float]] = {}
        for mini in self._mini_batches(batch):
            counts = self._counts(mini["response_mask"])
            for micro in self._micro(mini):
                for name, value in self._loss(micro, counts).items():
                    stats.setdefault(name, []).append(value)
            stats.setdefault("actor/grad_norm", []).append(self._step())
        result = {name: float(np.mean(v)) for name, v in stats.items()}
        result["actor/lr"] = self.optimizer.param_groups[0]["lr"]
        return result

    def _loss(self, micro: Batch, counts: dict[str, int]) -> dict[str, float]:
        alg = self.config.algorithm
        mask = micro["response_mask"].to(self.device)
        logits = self._logits(micro, self.trained)
        log_probs = token_log_probs(logits, micro["responses"].to(self.device))
        agg = {"loss_agg_mode": alg.loss_agg_func, **counts}
        pg_loss, pg = self.policy_loss(
            micro["old_log_probs"].to(self.device), log_probs,
            micro["advantages"].to(self.device), mask,
            clip_ratio_low=alg.clip_ratio_low, clip_ratio_high=alg.clip_ratio_high,
            clip_ratio_c=alg.clip_ratio_c, **agg,
        )  # fmt: skip
        ent = agg_loss(entropy(logits), mask, alg.loss_agg_func, **counts)
        loss = pg_loss - alg.entropy_bonus * ent
        metrics = {
            "actor/pg_loss": float(pg_loss.detach()),
            "actor/pg_clipfrac": float(pg["pg_clipfrac"]),
            "actor/ppo_kl": float(pg["ppo_kl"]),
            "actor/entropy": float(ent.detach()),
        }
        if alg.use_kl_loss:
            kl = kl_penalty(log_probs, micro["ref_log_probs"].to(self.device), alg.kl_loss_type)
            kl_loss = agg_loss(kl, mask, alg.loss_agg_func, **counts)
            loss = loss + alg.kl_loss_coef * kl_loss
            metrics["actor/kl_loss"] = float(kl_loss.detach())
        # Each micro-batch holds its share of the global mini-batch loss; DDP averages over
        # ranks, so scaling by the world size makes the summed gradient the global one.
        (loss * self.world_size).backward()
        return metrics


class LMCritic(_Trainer):
    """The separate value model: ``compute_values`` and a clipped value-loss update."""

    def __init__(self, ctx: Any, config: ReasoningConfig, model_dir: Path) -> None:
        model = load_value_model(model_dir, config.actor.model.dtype)
        update = config.critic_update()
        super().__init__(ctx, config, model, config.critic.optim, update, config.runner.seed + 1)

    def _values(self, batch: Batch, module: Any) -> torch.Tensor:
        batch = {
            k: v.to(self.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()
        }
        out = module(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                     position_ids=batch["position_ids"], use_cache=False)  # fmt: skip
        # V(s_t) for response token t is read where that token is predicted, as the logits are.
        return out.logits[:, -batch["responses"].shape[1] - 1 : -1, 0].float()

    @torch.no_grad()
    def compute_values(self, batch: Batch) -> torch.Tensor:
        size = self.update_sizes.ppo_micro_batch_size or len(batch["responses"])
        values = [self._values(m, self.model).cpu() for m in micro_batches(batch, size)]
        return torch.cat(values) * batch["response_mask"]

    def update(self, batch: Batch) -> dict[str, float]:
        alg = self.config.algorithm
        stats: dict[str, list[float]] = {}
        for mini in self._mini_batches(batch):
            counts = self._counts(mini["response_mask"])
            for micro in self._micro(mini):
                mask = micro["response_mask"].to(self.device)
                predicted = self._values(micro, self.trained)
                loss, extra = clipped_value_loss(
                    predicted, micro["returns"].to(self.device), micro["values"].to(self.device),
                    mask, value_clip=alg.value_clip, huber_delta=alg.huber_delta,
                    loss_agg_mode=alg.loss_agg_func, **counts,
                )  # fmt: skip
                (loss * self.world_size).backward()
                stats.setdefault("critic/value_loss", []).append(float(loss.detach()))
                stats.setdefault("critic/vf_clipfrac", []).append(float(extra["vf_clipfrac"]))
            stats.setdefault("critic/grad_norm", []).append(self._step())
        result = {name: float(np.mean(v)) for name, v in stats.items()}
        result["critic/lr"] = self.optimizer.param_groups[0]["lr"]
        return result


class LMReference:
    """The frozen initial policy: log-probs for the KL to it, nothing else."""

    def __init__(self, ctx: Any, config: ReasoningConfig, model_dir: Path) -> None:
        self.config = config
        self.device = ctx.torch_device if ctx is not None else torch.device("cpu")
        if ctx is not None:
            torch.set_num_threads(config.runner.torch_threads)
        self.model = load_causal_lm(model_dir, config.actor.model.dtype).to(self.device).eval()
        self.model.requires_grad_(False)
        self.temperature = config.rollout.temperature

    @torch.no_grad()
    def compute_log_probs(self, batch: Batch) -> torch.Tensor:
        size = self.config.actor.ppo_micro_batch_size or len(batch["responses"])
        parts = []
        for m in micro_batches(batch, size):
            m = {k: v.to(self.device) if isinstance(v, torch.Tensor) else v for k, v in m.items()}
            logits = response_logits(self.model, m, m["responses"].shape[1]) / self.temperature
            parts.append(token_log_probs(logits, m["responses"]).cpu())
        return torch.cat(parts)
