"""The language-model components: ``LMActor`` (the policy), ``LMCritic`` (a separate value model)
and ``LMReference`` (the frozen initial policy).

Actor and critic train through ``Trainer`` (strategy, optimiser, schedule, mini- and
micro-batches, global counts: verl's recipe, see trainer.py); what is theirs is the loss. The
actor's is ``rlcore.algorithms.ppo_loss`` with the KL loss when ``use_kl_loss``; the critic's the
clipped value loss. Log-probs are of the distribution the sampler drew from (logits divided by
``rollout.temperature``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

from rlcore.algorithms import (
    LOSS_SHARES,
    ppo_loss,
    value_loss,
)
from rlcore.algorithms.loss import OPTIONAL_READS
from rlcore.columns import (
    ATTENTION_MASK,
    IMAGE_COLUMNS,
    INPUT_IDS,
    LOSS_MASK,
    OLD_LOG_PROBS,
    POSITION_IDS,
    RESPONSE_MASK,
    RESPONSES,
    RETURNS,
    ROUTED_EXPERTS,
    SUM_PI_SQUARED,
    VALUES,
)
from rlcore.config.errors import ConfigError
from rlcore.config.schema import ReasoningConfig
from rlcore.config.sections import UpdateConfig
from rlcore.data.packing import padding_share
from rlcore.data.sequences import token_budget_split, trim_padding
from rlcore.models import ulysses
from rlcore.models.forward import (
    check_packing,
    inner_model,
    one_row_kernel,
    response_log_probs,
    response_values,
)
from rlcore.models.fused_head import TokenStats, check_fused_head
from rlcore.models.lm import (
    compile_layers,
    enable_gradient_checkpointing,
    freeze_vision,
    is_adapter,
    load_causal_lm,
    load_value_model,
    with_lora,
)
from rlcore.models.moe import Routing, is_moe, replay_refusal
from rlcore.scheduler.dispatch import Dispatch, dispatch
from rlcore.workers.training.megatron_strategy import MegatronOptions
from rlcore.workers.training.strategy import FsdpOptions
from rlcore.workers.training.trainer import TrainedComponent, Trainer, UpdateSizes

# What a forward pass reads of the batch; an actor update adds the loss's columns
# (``PPOLossSettings.reads``), a critic update the value loss's.
MODEL_READS = (INPUT_IDS, ATTENTION_MASK, POSITION_IDS, RESPONSES, RESPONSE_MASK)


def with_aux_loss(
    config: ReasoningConfig,
    model: Any,
    routing: Routing | None,
    loss: torch.Tensor,
    metrics: dict[str, torch.Tensor],
    micro: TensorDict,
    counts: dict[str, int] | None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``loss`` plus the routers' load-balancing loss (``aux_loss``, its weight
    ``aux_loss_coef``) where ``routing`` kept their logits: weighed by the micro-batch's share
    of the mini-batch's tokens, as the token-mean loss is, so the update's total counts it once."""
    aux = routing.aux_loss() if routing is not None else None
    if aux is None:
        return loss, metrics
    share = micro[LOSS_MASK].sum() / counts["num_tokens"] if counts else 1.0
    loss = loss + aux_loss_coef(config, model) * share * aux
    return loss, {**metrics, "aux_loss": aux.detach()}


def check_sequence_split(model: Any, size: int, key: str) -> None:
    """Refuse a Ulysses split of ``size`` ranks that ``model``'s attention heads do not allow,
    or of a mixture-of-experts model (the split passes keep no router logits: its
    load-balancing loss would be dropped)."""
    if size == 1:
        return
    if is_moe(model):
        raise ConfigError(
            f"{key}: {size}, not built for a mixture-of-experts model (its load-balancing loss "
            f"is not split); set {key}=1"
        )
    if (why := ulysses.refusal(inner_model(model).config, size)) is not None:
        raise ConfigError(f"{key}: {size}, but {why}; choose a size that divides them")


def _check_routing_replay(config: ReasoningConfig, model: Any) -> None:
    """Refuse ``rollout.routing_replay`` for a model it cannot replay: a dense one, or one
    whose routers do not choose the softmax's top k."""
    if not config.rollout.routing_replay:
        return
    why = replay_refusal(model) if is_moe(model) else "a dense model (no MoE router)"
    if why is not None:
        raise ConfigError(
            f"rollout.routing_replay: {type(inner_model(model)).__name__} has {why}; set "
            "rollout.routing_replay=false"
        )


def _model_reads(batch: TensorDict) -> tuple[str, ...]:
    """``MODEL_READS``, and the rollout's recorded experts and the prompts' images where the
    batch has them."""
    return MODEL_READS + tuple(k for k in (ROUTED_EXPERTS, *IMAGE_COLUMNS) if k in batch)


def routing_of(config: ReasoningConfig, model: Any, gradient: bool) -> Routing | None:
    """What a pass of ``model`` does with its routers (None for a dense model): replays the
    batch's recorded experts with ``rollout.routing_replay``; in a pass with ``gradient``,
    keeps the router logits for the load-balancing loss when its weight is above 0."""
    if not is_moe(model):
        return None
    keep = gradient and aux_loss_coef(config, model) > 0
    return Routing(model, replay=config.rollout.routing_replay, keep_logits=keep)


def aux_loss_coef(config: ReasoningConfig, model: Any) -> float:
    """``actor.router_aux_loss_coef``, else the model config's ``router_aux_loss_coef``."""
    if config.actor.router_aux_loss_coef is not None:
        return config.actor.router_aux_loss_coef
    return float(getattr(inner_model(model).config, "router_aux_loss_coef", 0.0) or 0.0)


CRITIC_READS = (*MODEL_READS, LOSS_MASK, VALUES, RETURNS)


def _trainer(
    ctx: Any,
    config: ReasoningConfig,
    model: Any,
    section: Any,
    update: UpdateConfig,
    updates: int,
    seed: int,
    budget: int | None,
) -> Trainer:
    """``section``: the component's config section (its optimiser, training backend and fsdp
    options); ``updates``: the run's updates of the component; ``budget``: its
    micro-batches' token budget (None: ``update``'s micro-batch size)."""
    group = config.algorithm.group_size
    size, world = section.ulysses_sequence_parallel_size, getattr(ctx, "world_size", 1)
    if world % size:
        who = "actor" if section is config.actor else "critic"
        raise ConfigError(
            f"{who}.ulysses_sequence_parallel_size: {size} does not divide the {who}'s {world} "
            "ranks; give it a divisor of them (cluster.component_placement places the ranks)"
        )
    if config.actor.model.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    if section.use_torch_compile:
        compile_layers(model)
    return Trainer(
        ctx,
        model,
        optim=section.optim,
        updates=updates,
        # a mini-batch is ppo_mini_batch_size prompts, each with its group_size responses
        sizes=UpdateSizes(
            update.ppo_epochs,
            update.ppo_mini_batch_size * group,
            update.ppo_micro_batch_size,
            update.shuffle,
        ),
        seed=seed,
        additive=LOSS_SHARES,
        backend=section.training_backend,
        fsdp=FsdpOptions.of(section.fsdp),
        megatron=MegatronOptions.of(section.megatron, seed),
        max_skipped_steps=config.runner.max_skipped_steps,
        split=_splitter(budget),
        cut=trim_padding,
        sequence_parallel=section.ulysses_sequence_parallel_size,
    )


def _forward_size(config: ReasoningConfig) -> int | None:
    """Responses per forward-only pass (old and reference log-probs) on one rank."""
    actor = config.actor
    return actor.log_prob_micro_batch_size or actor.ppo_micro_batch_size


def _with_budget_length(counts: dict[str, int], micro: TensorDict, config: ReasoningConfig):
    """``counts`` for the loss of ``micro``. ``seq-mean-token-sum-norm`` divides by sequences x
    T, T the width of the loss (Dr. GRPO's constant): here the generation budget
    ``data.max_response_length``, whatever width the batch and this micro-batch were cut to,
    so the sequence count is scaled by the budget over the width."""
    if config.algorithm.loss_agg_func != "seq-mean-token-sum-norm":
        return counts
    width = micro[RESPONSES].shape[1]
    return {**counts, "num_seqs": counts["num_seqs"] * config.data.max_response_length / width}


def _check_packing(config: ReasoningConfig, model: Any) -> None:
    if config.actor.model.use_remove_padding:
        check_packing(model)


def _check_causal_lm(config: ReasoningConfig, model: Any) -> None:
    """The checks of a policy model (the actor's, the reference's) when it loads."""
    _check_packing(config, model)
    if config.actor.model.use_fused_kernels:
        check_fused_head(inner_model(model))


def _padding_share(
    module: Any, micro: TensorDict, config: ReasoningConfig, share_prompts: bool = False
) -> torch.Tensor:
    """The share of the micro-batch pass's token positions that are padding (a metric)."""
    packed = config.actor.model.use_remove_padding
    one_row = packed and one_row_kernel(module)
    share = padding_share(micro, packed, one_row, share_prompts)
    return torch.tensor(share, device=micro[RESPONSES].device)


def _chunk_size(config: ReasoningConfig) -> int | None:
    """Token positions a chunk of the log-prob and entropy computation, or None (all at once):
    the fused pass always takes chunks (all at once would hold the logits it exists to avoid)."""
    actor = config.actor
    chunked = actor.entropy_from_logits_with_chunking or actor.model.use_fused_kernels
    return actor.entropy_from_logits_chunk_size if chunked else None


def _token_stats(owner: Any, entropy: bool, sum_pi_squared: bool = False) -> TokenStats:
    compiled = owner.config.actor.use_torch_compile  # the reference follows the actor
    return TokenStats(
        owner.temperature, _chunk_size(owner.config), entropy, sum_pi_squared, compiled
    )


def sequence_group(owner: Any) -> Any:
    """The Ulysses group ``owner``'s passes are split over (None: each rank computes whole)."""
    trainer = getattr(owner, "trainer", None)
    return getattr(trainer.strategy, "sp_group", None) if trainer is not None else None


def _response_log_probs(
    config: ReasoningConfig,
    model: Any,
    micro: TensorDict,
    stats: TokenStats,
    checkpoint=False,
    routing: Routing | None = None,
    sp_group: Any = None,
):
    model_config = config.actor.model
    if sp_group is not None:  # (the config refuses what it does not split: fused, shared, ...)
        logp, entropy = ulysses.packed_log_probs(
            model, micro, sp_group, stats.temperature, stats.entropy
        )
        return logp, entropy, None
    return response_log_probs(
        model,
        micro,
        stats,
        packed=model_config.use_remove_padding,
        share_prompts=model_config.share_group_prompts,
        fused=model_config.use_fused_kernels,
        checkpoint=checkpoint,
        routing=routing,
    )


def _splitter(budget: int | None):
    """The ``Trainer``'s ``split``: micro-batches by a token budget, or None (by count)."""
    return None if budget is None else functools.partial(token_budget_split, budget=budget)


def forward_in_parts(
    batch: TensorDict,
    size: int | None,
    budget: int | None,
    model: Any,
    fn: Callable[[Any, TensorDict], dict[str, torch.Tensor]],
    strategy: Any = None,
) -> TensorDict:
    """``fn(model, micro)``'s ``[b, r]`` outputs over forward-only micro-batches of ``batch``
    (``size`` rows each, or by the token ``budget``; each cut of its padding columns), put back
    in the batch's row order as ``[B, R]`` (0 in the columns a micro-batch did not have). Under a
    ``strategy`` with pipeline stages, the micro-batches run through its pipeline."""
    rows_total, width = batch.batch_size[0], batch[RESPONSES].shape[1]
    if budget is not None:
        plan = token_budget_split(batch, budget)
    else:
        step = size or rows_total
        plan = [slice(s, s + step) for s in range(0, rows_total, step)]  # views, no copies
    if strategy is not None and strategy.pipeline_size > 1:
        micros = [trim_padding(batch[rows]) for rows in plan]
        parts = strategy.pipeline(model, micros, fn, forward_only=True)
    else:
        parts = (fn(model, trim_padding(batch[rows])) for rows in plan)
    out: dict[str, torch.Tensor] = {}
    for rows, part in zip(plan, parts, strict=True):
        for key, value in part.items():
            if key not in out:
                out[key] = value.new_zeros((rows_total, width))
            out[key][rows, : value.shape[1]] = value.to(out[key].device)
    return TensorDict(out, batch_size=[rows_total])


@torch.no_grad()
def _forward_log_probs(
    owner: Any, batch: TensorDict, sum_pi_squared: bool = False, old: bool = False
) -> TensorDict:
    """``log_probs`` ``[B, R]`` of the responses under ``owner``'s model (the actor's or the
    reference's) at the rollout's temperature, in forward-only micro-batches; with
    ``sum_pi_squared``, also the sum of the squared token probabilities at each position.
    ``old``: the actor's old log-probs, whose replayed routings are compared with its routers'
    own choice (``owner.routings``, reported by the next update)."""
    batch = batch.select(*_model_reads(batch)).to(owner.device)

    def run(model: Any, micro: TensorDict) -> dict[str, torch.Tensor]:
        stats = _token_stats(owner, entropy=False, sum_pi_squared=sum_pi_squared)
        routing = routing_of(owner.config, model, gradient=False)
        sp = sequence_group(owner)
        logp, _, sums = _response_log_probs(owner.config, model, micro, stats, False, routing, sp)
        if old and routing is not None and routing.replay:  # the actor's old log-probs
            owner.routings[0] += routing.compared
            owner.routings[1] += routing.flipped
        part = {} if sums is None else {SUM_PI_SQUARED: sums.cpu()}
        return {"log_probs": logp.cpu(), **part}

    config = owner.config
    return _on_local_rows(
        owner, batch, _forward_size(config), config.actor.max_tokens_per_micro_batch, run
    )


def _on_local_rows(
    owner: Any,
    batch: TensorDict,
    size: int | None,
    budget: int | None,
    fn: Callable[[Any, TensorDict], dict[str, torch.Tensor]],
) -> TensorDict:
    """``forward_in_parts`` of ``fn`` with ``owner``'s model over the rows ``owner``'s rank
    computes on (under Megatron's model parallelism, those of its whole model replica), this
    rank's own rows of the result."""
    trainer = getattr(owner, "trainer", None)
    if trainer is None:  # the reference: a transformers model on each rank
        return forward_in_parts(batch, size, budget, owner.model, fn)
    rows, own = trainer.strategy.local_batch(batch)
    return forward_in_parts(rows, size, budget, owner.model, fn, trainer.strategy)[own]


class LMActor(TrainedComponent):
    """The policy: recomputes ``old_log_probs`` and runs PPO's update."""

    def __init__(self, ctx: Any, config: ReasoningConfig, model_dir: Path) -> None:
        self.config = config
        self.lora = config.actor.model.lora.rank > 0
        lm = config.actor.model
        model = load_causal_lm(model_dir, lm.dtype)
        model = with_lora(freeze_vision(model, lm.freeze_vision_tower), lm.lora)
        self.share_prompts = config.actor.model.share_group_prompts
        # the actor starts updating after critic.critic_warmup iterations
        updates = config.derived.iterations - config.critic.critic_warmup
        self.trainer = _trainer(
            ctx,
            config,
            model,
            config.actor,
            config.actor,
            updates,
            config.runner.seed,
            config.actor.max_tokens_per_micro_batch,
        )
        self.model, self.device = self.trainer.model, self.trainer.device
        _check_causal_lm(config, self.model)
        self.loss_settings = config.algorithm.ppo_loss_settings()
        self.temperature = config.rollout.temperature
        # routing replay: token-layer routings compared, and replayed against the router's
        # own choice, in the old log-probs' passes since the last update
        self.routings = [0, 0]
        _check_routing_replay(config, self.model)
        size = config.actor.ulysses_sequence_parallel_size
        check_sequence_split(self.model, size, "actor.ulysses_sequence_parallel_size")

    def _log_probs_entropy(self, module: Any, batch: TensorDict, routing: Routing | None = None):
        stats = _token_stats(self, entropy=True)
        checkpoint = self.config.actor.entropy_checkpointing
        logp, entropy, _ = _response_log_probs(
            self.config, module, batch, stats, checkpoint, routing, sequence_group(self)
        )
        return logp, entropy

    @dispatch(Dispatch.SHARD)
    def compute_log_probs(self, batch: TensorDict) -> torch.Tensor:
        """``[B, R]`` log-probs of the responses under the current policy."""
        return _forward_log_probs(self, batch, old=True)["log_probs"]

    def weight_tensors(self) -> dict[str, torch.Tensor]:
        """What a sync sends: every tensor, or with LoRA the adapters alone (the rollout holds
        the same frozen base)."""
        tensors = super().weight_tensors()
        return {k: v for k, v in tensors.items() if is_adapter(k)} if self.lora else tensors

    @dispatch(Dispatch.SHARD)
    def compute_ref_log_probs(self, batch: TensorDict) -> torch.Tensor:
        """With LoRA, the reference policy's ``[B, R]`` log-probs: the base model, the adapters
        switched off for the pass (no second copy of the weights)."""
        if not self.lora:
            raise RuntimeError("the actor is the reference only with LoRA adapters")
        with self.model.disable_adapter():
            return _forward_log_probs(self, batch)["log_probs"]

    @dispatch(Dispatch.SHARD)
    def compute_log_probs_and_sum_pi_squared(self, batch: TensorDict) -> TensorDict:
        """``old_log_probs`` as ``compute_log_probs``, and ``sum_pi_squared``: the sum over the
        vocabulary of the squared token probabilities at each response position, ``[B, R]``
        (what the optimal token baselines read), from the same forward pass."""
        out = _forward_log_probs(self, batch, sum_pi_squared=True, old=True)
        return out.rename_key_("log_probs", OLD_LOG_PROBS)

    @dispatch(Dispatch.SHARD_REDUCED)
    def update(self, batch: TensorDict) -> dict[str, float]:
        reads = _model_reads(batch) + self.loss_settings.reads(value_head=False)
        reads += tuple(k for k in OPTIONAL_READS if k in batch)
        metrics = self.trainer.fit(batch.select(*reads), self._loss, mask_key=LOSS_MASK)
        out = {f"actor/{k}": v for k, v in metrics.items()}
        compared, flipped = self.routings
        if compared:  # the old log-probs' passes since the last update
            out["rollout_corr/routing_mismatch"] = flipped / compared
        self.routings = [0, 0]
        return out

    def _loss(self, module: Any, micro: TensorDict, counts: dict[str, int]):
        routing = routing_of(self.config, module, gradient=True)
        log_probs, entropy = self._log_probs_entropy(module, micro, routing)
        counts = _with_budget_length(counts, micro, self.config)
        loss, metrics = ppo_loss(self.loss_settings, micro, log_probs, entropy, counts=counts)
        share = _padding_share(module, micro, self.config, self.share_prompts)
        metrics = {**metrics, "padding_share": share}
        return with_aux_loss(self.config, module, routing, loss, metrics, micro, counts)


class LMCritic(TrainedComponent):
    """The separate value model: ``compute_values`` and a clipped value-loss update."""

    def __init__(self, ctx: Any, config: ReasoningConfig, model_dir: Path) -> None:
        self.config = config
        lm = config.actor.model
        model = load_value_model(model_dir, lm.dtype)
        model = with_lora(freeze_vision(model, lm.freeze_vision_tower), lm.lora, value_head=True)
        self.update_sizes = config.derived.critic_update
        self.budget = config.derived.critic_token_budget
        self.trainer = _trainer(
            ctx,
            config,
            model,
            config.critic,
            self.update_sizes,
            config.derived.iterations,
            config.runner.seed + 1,
            self.budget,
        )
        self.model, self.device = self.trainer.model, self.trainer.device
        _check_packing(config, self.model)
        size = config.critic.ulysses_sequence_parallel_size
        check_sequence_split(self.model, size, "critic.ulysses_sequence_parallel_size")

    def _values(self, module: Any, batch: TensorDict, routing: Routing | None = None):
        if (sp := sequence_group(self)) is not None:
            return ulysses.packed_values(module, batch, sp)
        packed = self.config.actor.model.use_remove_padding
        return response_values(module, batch, packed, routing)

    @dispatch(Dispatch.SHARD)
    @torch.no_grad()
    def compute_values(self, batch: TensorDict) -> torch.Tensor:
        """``[B, R]`` values of the response tokens (0 past each response's end)."""
        batch = batch.select(*_model_reads(batch)).to(self.device)

        def run(model: Any, micro: TensorDict) -> dict[str, torch.Tensor]:
            values = self._values(model, micro) * micro[RESPONSE_MASK]
            return {VALUES: values.cpu()}

        return _on_local_rows(
            self, batch, self.update_sizes.ppo_micro_batch_size, self.budget, run
        )[VALUES]

    @dispatch(Dispatch.SHARD_REDUCED)
    def update(self, batch: TensorDict) -> dict[str, float]:
        reads = CRITIC_READS + tuple(k for k in IMAGE_COLUMNS if k in batch)
        metrics = self.trainer.fit(batch.select(*reads), self._loss, LOSS_MASK)
        return {f"critic/{k}": v for k, v in metrics.items()}

    def _loss(self, module: Any, micro: TensorDict, counts: dict[str, int]):
        alg = self.config.algorithm
        routing = None
        if is_moe(module) and aux_loss_coef(self.config, module) > 0:
            routing = Routing(module, replay=False, keep_logits=True)
        loss, metrics = value_loss(
            self._values(module, micro, routing),
            micro[RETURNS],
            micro[VALUES],
            micro[LOSS_MASK],
            value_clip=alg.value_clip,
            huber_delta=alg.huber_delta,
            loss_agg_mode=alg.loss_agg_func,
            **_with_budget_length(counts, micro, self.config),
        )
        out = {
            "vf_loss": loss.detach(),
            "vf_clipfrac": metrics["vf_clipfrac"],
            "padding_share": _padding_share(module, micro, self.config),
        }
        return with_aux_loss(self.config, module, routing, loss, out, micro, counts)


def reference_dtype(config: ReasoningConfig) -> str:
    """The reference model's dtype: the one the actor's passes compute in. Under FSDP2 with
    mixed precision that is ``actor.fsdp.param_dtype`` (the frozen model needs no copy in the
    optimiser's dtype), so the KL to it starts at 0 and its pass costs what the actor's does
    (as verl's reference, whose FSDP wrapping casts to the same ``param_dtype``)."""
    actor = config.actor
    if actor.training_backend == "fsdp2" and actor.fsdp.param_dtype is not None:
        return actor.fsdp.param_dtype
    return actor.model.dtype


class LMReference:
    """The frozen initial policy: log-probs for the KL to it, nothing else."""

    def __init__(self, ctx: Any, config: ReasoningConfig, model_dir: Path) -> None:
        self.config = config
        self.device = ctx.torch_device
        self.model = load_causal_lm(model_dir, reference_dtype(config)).to(self.device).eval()
        self.model.requires_grad_(False)
        if config.actor.use_torch_compile:
            compile_layers(self.model)
        _check_causal_lm(config, self.model)
        self.temperature = config.rollout.temperature

    @dispatch(Dispatch.SHARD)
    def compute_log_probs(self, batch: TensorDict) -> torch.Tensor:
        return _forward_log_probs(self, batch)["log_probs"]
