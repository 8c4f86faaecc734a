"""verl's spellings of rlcore keys (verl 0.9.1 and earlier), accepted as written: the full key
paths verl's trainer reads (``actor_rollout_ref.rollout.n``, ``algorithm.lam``), each the rlcore
key(s) it means; the pairs of keys read together (verl's dynamic batch size); and the top-level
sections only verl has. verl keys with no rlcore counterpart are refused by the validator with
that reason (``key_lists.VERL_KEYS``, ``foreign_section``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlcore.config.errors import ConfigError
from rlcore.config.foreign.alias import Alias, loggers, minus_one_is


def _verl(
    *targets: str, convert: Callable[[Any], Any] | None = None, note: str = "", yields: str = ""
) -> Alias:
    return Alias("verl", targets, convert, note, yields)


def _resume_mode(value: Any) -> Any:
    """verl's ``trainer.resume_mode``: auto and disable; resume_path is runner.resume_dir."""
    if value == "resume_path":
        raise ConfigError(
            "trainer.resume_mode: resume_path is runner.resume_dir=PATH here (the checkpoint, "
            "or a run folder for its newest); give that instead"
        )
    return {"auto": "auto", "disable": "never"}.get(value, value)


def _strategy(section: str, value: Any) -> Any:
    """verl's ``strategy`` (fsdp, fsdp2, megatron) -> ``training_backend``: verl's fsdp (FSDP1)
    runs as FSDP2 here, which shards the same way with per-parameter sharding."""
    backends = {"fsdp": "fsdp2", "fsdp2": "fsdp2", "megatron": "megatron"}
    if value not in backends:
        raise ConfigError(
            f"{section}.strategy: {value!r} is not one of verl's fsdp, fsdp2, megatron "
            "(training_backend here: torch, fsdp2, megatron)"
        )
    return backends[value]


def _only(key: str, allowed: tuple[str, ...], why: str) -> Callable[[Any], Any]:
    """The conversion of verl's ``key`` that takes ``allowed`` values as they are and refuses
    another, saying ``why`` (what rlcore has instead)."""

    def check(value: Any) -> Any:
        if value not in allowed:
            raise ConfigError(f"{key}: {value!r}; {why}")
        return value

    return check


# verl's lr_scheduler_type -> optim.decay: constant and cosine are both here
_scheduler = _only(
    "lr_scheduler_type",
    ("constant", "cosine"),
    "verl's are constant and cosine (optim.decay here: constant, linear, cosine)",
)
_engine = _only(
    "actor_rollout_ref.rollout.name",
    ("hf", "sglang"),
    "the rollout engines here are hf and sglang (rollout.backend), so give sglang (verl's other "
    "server engine) or hf",
)
_device = _only("trainer.device", ("cuda", "cpu"), "rlcore runs on cuda or cpu (cluster.device)")


def _loss_mode(value: Any) -> Any:
    return "ppo" if value == "vanilla" else value


PER_RANK = (
    "counted per rank here (verl's deprecated spelling counts across all GPUs, the _per_gpu one "
    "per GPU; the same on one GPU); micro-batches change memory use, never the update"
)

OFFLOAD = (
    "FSDP2's CPU offload moves parameters, gradients and optimiser state together: verl's "
    "param_offload, optimizer_offload and offload_policy are one switch here"
)
REF_AS_ACTOR = "the reference model is built and sharded as the actor here"
REF_YIELDS = (
    "the reference model is built and sharded as the actor here, so the actor's offload "
    "decides for both (it moves memory, never a value)"
)
WARMUP = "verl's -1 (warm up over lr_warmup_steps_ratio of the run, 0 by default) is 0"
COSINE = "cosine decays to 0 over the run after the warm-up (verl's min_lr_ratio 0, half a cycle)"

# verl's actor.policy_loss.<option> keys, each algorithm.policy_loss_options.<option> here
POLICY_LOSS_OPTIONS = (
    "clip_cov_ratio",
    "clip_cov_lb",
    "clip_cov_ub",
    "kl_cov_ratio",
    "ppo_kl_coef",
    "dro_beta",
)

VERL_ALIASES: dict[str, Alias] = {
    # verl: actor_rollout_ref.rollout.*
    "actor_rollout_ref.rollout.n": _verl("algorithm.group_size"),
    "actor_rollout.ref.rollout.n": _verl(
        "algorithm.group_size", note="verl's PPO page spells actor_rollout_ref so"
    ),
    "actor_rollout_ref.rollout.name": _verl("rollout.backend", convert=_engine),
    "actor_rollout_ref.rollout.calculate_log_probs": _verl("rollout.calculate_log_probs"),
    "actor_rollout_ref.rollout.temperature": _verl("rollout.temperature"),
    "actor_rollout_ref.rollout.enable_rollout_routing_replay": _verl("rollout.routing_replay"),
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size": _verl(
        "actor.ulysses_sequence_parallel_size"
    ),
    "actor_rollout_ref.ref.ulysses_sequence_parallel_size": _verl(
        "actor.ulysses_sequence_parallel_size",
        note="one key for the actor and reference",
        yields="the actor's: the reference computes whole",
    ),
    "critic.ulysses_sequence_parallel_size": _verl("critic.ulysses_sequence_parallel_size"),
    "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size": _verl(
        "actor.ulysses_sequence_parallel_size"
    ),
    "actor_rollout_ref.ref.fsdp_config.ulysses_sequence_parallel_size": _verl(
        "actor.ulysses_sequence_parallel_size",
        note="one key for the actor and reference",
        yields="the actor's: the reference computes whole",
    ),
    "critic.fsdp.ulysses_sequence_parallel_size": _verl("critic.ulysses_sequence_parallel_size"),
    "actor_rollout_ref.rollout.top_p": _verl("rollout.top_p"),
    "actor_rollout_ref.rollout.val_kwargs.n": _verl(
        "runner.val_n",
        note="validation samples besides the greedy answer, which is always taken",
    ),
    "actor_rollout_ref.rollout.val_kwargs.temperature": _verl("rollout.val_temperature"),
    "actor_rollout_ref.rollout.val_kwargs.top_p": _verl("rollout.val_top_p"),
    "actor_rollout_ref.rollout.val_kwargs.top_k": _verl(
        "rollout.val_top_k", convert=minus_one_is(0), note="verl's -1 (no limit) is 0"
    ),
    "actor_rollout_ref.rollout.top_k": _verl(
        "rollout.top_k", convert=minus_one_is(0), note="verl's -1 (no limit) is 0"
    ),
    "actor_rollout_ref.rollout.response_length": _verl("data.max_response_length"),
    "actor_rollout_ref.rollout.prompt_length": _verl("data.max_prompt_length"),
    "actor_rollout_ref.rollout.tensor_model_parallel_size": _verl("rollout.tensor_parallel_size"),
    "actor_rollout_ref.rollout.gpu_memory_utilization": _verl("rollout.gpu_memory_utilization"),
    "actor_rollout_ref.rollout.log_prob_micro_batch_size": _verl(
        "actor.log_prob_micro_batch_size", note=PER_RANK
    ),
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": _verl(
        "actor.log_prob_micro_batch_size"
    ),
    "actor_rollout_ref.ref.log_prob_micro_batch_size": _verl(
        "actor.log_prob_micro_batch_size", note=PER_RANK
    ),
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": _verl(
        "actor.log_prob_micro_batch_size"
    ),
    "actor_rollout_ref.nccl_timeout": _verl("cluster.collective_timeout_s"),
    # verl: actor_rollout_ref.model.* and actor_rollout_ref.actor.*
    "actor_rollout_ref.model.path": _verl("actor.model.path"),
    "critic.model.enable_gradient_checkpointing": _verl(
        "actor.model.gradient_checkpointing",
        note="one key for the actor and critic",
        yields="one key for the actor and critic here, so the actor's decides (it trades "
        "memory for time, never a value)",
    ),
    "actor_rollout_ref.model.enable_gradient_checkpointing": _verl(
        "actor.model.gradient_checkpointing"
    ),
    "actor_rollout_ref.model.use_remove_padding": _verl("actor.model.use_remove_padding"),
    "actor_rollout_ref.model.use_fused_kernels": _verl(
        "actor.model.use_fused_kernels", note="the actor's and the reference's passes"
    ),
    "actor_rollout_ref.actor.use_fused_kernels": _verl(
        "actor.model.use_fused_kernels", note="one key for the actor and reference"
    ),
    "actor_rollout_ref.actor.megatron.tensor_model_parallel_size": _verl(
        "actor.megatron.tensor_parallel_size"
    ),
    "critic.megatron.tensor_model_parallel_size": _verl("critic.megatron.tensor_parallel_size"),
    "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size": _verl(
        "actor.megatron.pipeline_parallel_size"
    ),
    "critic.megatron.pipeline_model_parallel_size": _verl("critic.megatron.pipeline_parallel_size"),
    "critic.model.use_remove_padding": _verl(
        "actor.model.use_remove_padding", note="one key for the actor, critic and reference"
    ),
    "actor_rollout_ref.actor.ppo_mini_batch_size": _verl("actor.ppo_mini_batch_size"),
    "actor_rollout_ref.actor.shuffle": _verl("actor.shuffle"),
    "actor_rollout_ref.actor.ppo_micro_batch_size": _verl(
        "actor.ppo_micro_batch_size", note=PER_RANK
    ),
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": _verl("actor.ppo_micro_batch_size"),
    "actor_rollout_ref.actor.ppo_epochs": _verl("actor.ppo_epochs"),
    **{
        f"actor_rollout_ref.actor.{section}{leaf}": _verl(f"actor.{leaf}", note=note)
        for section in ("", "fsdp_config.")
        for leaf, note in (
            ("entropy_from_logits_with_chunking", "the log-probs too, and the reference's passes"),
            ("entropy_from_logits_chunk_size", ""),
            ("entropy_checkpointing", "the log-probs' intermediates too"),
        )
    },
    "actor_rollout_ref.actor.clip_ratio": _verl(
        "algorithm.clip_ratio_low", "algorithm.clip_ratio_high"
    ),
    "actor_rollout_ref.actor.clip_ratio_low": _verl("algorithm.clip_ratio_low"),
    "actor_rollout_ref.actor.clip_ratio_high": _verl("algorithm.clip_ratio_high"),
    "actor_rollout_ref.actor.clip_ratio_c": _verl("algorithm.clip_ratio_c"),
    "actor_rollout_ref.actor.loss_agg_mode": _verl("algorithm.loss_agg_func"),
    "actor_rollout_ref.actor.entropy_coeff": _verl("algorithm.entropy_bonus"),
    "actor_rollout_ref.actor.use_kl_loss": _verl("algorithm.use_kl_loss"),
    "actor_rollout_ref.actor.kl_loss_coef": _verl("algorithm.kl_loss_coef"),
    "actor_rollout_ref.actor.kl_loss_type": _verl("algorithm.kl_loss_type"),
    "actor_rollout_ref.actor.policy_loss.loss_mode": _verl(
        "algorithm.policy_loss", convert=_loss_mode, note="verl's vanilla is ppo"
    ),
    **{
        f"actor_rollout_ref.actor.policy_loss.{option}": _verl(
            f"algorithm.policy_loss_options.{option}"
        )
        for option in POLICY_LOSS_OPTIONS
    },
    # verl keeps SAPO's temperatures on the actor, not under policy_loss
    "actor_rollout_ref.actor.tau_pos": _verl("algorithm.policy_loss_options.tau_pos"),
    "actor_rollout_ref.actor.tau_neg": _verl("algorithm.policy_loss_options.tau_neg"),
    "actor_rollout_ref.actor.grad_clip": _verl("actor.optim.max_grad_norm"),
    "actor_rollout_ref.actor.optim.clip_grad": _verl("actor.optim.max_grad_norm"),
    "critic.optim.clip_grad": _verl("critic.optim.max_grad_norm"),
    "actor_rollout_ref.actor.optim.lr_warmup_steps": _verl(
        "actor.optim.warmup_steps", convert=minus_one_is(0), note=WARMUP
    ),
    "actor_rollout_ref.actor.optim.lr_scheduler_type": _verl(
        "actor.optim.decay", convert=_scheduler, note=COSINE
    ),
    "critic.optim.lr_scheduler_type": _verl("critic.optim.decay", convert=_scheduler, note=COSINE),
    "actor_rollout_ref.actor.use_remove_padding": _verl(
        "actor.model.use_remove_padding", note="one key for the actor, critic and reference"
    ),
    "actor_rollout_ref.actor.optim.lr": _verl("actor.optim.lr"),
    "actor_rollout_ref.actor.optim.weight_decay": _verl("actor.optim.weight_decay"),
    # verl: critic.* (ppo_mini_batch_size, ppo_epochs, optim.lr, ... are spelled as in rlcore)
    "critic.model.path": _verl("critic.model_path"),
    "critic.ppo_micro_batch_size_per_gpu": _verl("critic.ppo_micro_batch_size"),
    "critic.cliprange_value": _verl("algorithm.value_clip"),
    "critic.grad_clip": _verl("critic.optim.max_grad_norm"),
    # verl: algorithm.* (gamma, use_kl_in_reward, kl_penalty, kl_ctrl.* are spelled as in rlcore)
    "algorithm.adv_estimator": _verl("algorithm.adv_type"),
    "algorithm.lam": _verl("algorithm.gae_lambda"),
    "algorithm.norm_adv_by_std_in_grpo": _verl("algorithm.norm_adv_by_std"),
    # verl: trainer.*
    "trainer.n_gpus_per_node": _verl("cluster.devices_per_node"),
    "trainer.nnodes": _verl("cluster.num_nodes"),
    "trainer.total_training_steps": _verl("runner.total_iterations"),
    "trainer.test_freq": _verl(
        "runner.val_every",
        convert=minus_one_is(0),
        note="0 (verl's -1) still validates before and after training",
    ),
    "trainer.save_freq": _verl(
        "runner.checkpoint_every", convert=minus_one_is(0), note="verl's -1 (never) is 0"
    ),
    "trainer.critic_warmup": _verl("critic.critic_warmup"),
    "trainer.experiment_name": _verl("runner.run_name"),
    "trainer.project_name": _verl("logger.project"),
    "reward_model.overlong_buffer.enable": _verl("reward.overlong_buffer.enable"),
    "reward_model.overlong_buffer.len": _verl("reward.overlong_buffer.len"),
    "reward_model.overlong_buffer.penalty_factor": _verl("reward.overlong_buffer.penalty_factor"),
    "trainer.log_val_generations": _verl(
        "runner.log_val_generations", note="written to RUN/validation/iter_NNNNNN.jsonl"
    ),
    "trainer.resume_mode": _verl("runner.resume", convert=lambda v: _resume_mode(v)),
    "trainer.max_actor_ckpt_to_keep": _verl(
        "runner.keep_checkpoints",
        note="a checkpoint here holds every component (actor, critic and the rest) together",
    ),
    "trainer.default_local_dir": _verl(
        "runner.output_dir",
        note="a run is written to OUTPUT_DIR/RUN_NAME (RUN_NAME: trainer.experiment_name)",
    ),
    "actor_rollout_ref.actor.freeze_vision_tower": _verl("actor.model.freeze_vision_tower"),
    "actor_rollout_ref.model.lora_rank": _verl("actor.model.lora.rank"),
    "actor_rollout_ref.model.lora_alpha": _verl("actor.model.lora.alpha"),
    "actor_rollout_ref.model.lora.rank": _verl("actor.model.lora.rank"),  # (verl 0.9)
    "actor_rollout_ref.model.lora.alpha": _verl("actor.model.lora.alpha"),
    "trainer.max_critic_ckpt_to_keep": _verl(
        "runner.keep_checkpoints",
        note="a checkpoint here holds every component (actor, critic and the rest) together",
    ),
    "trainer.resume_from_path": _verl(
        "runner.resume_dir",
        note="a checkpoint (RUN/checkpoints/iter_K) or a run folder, for its newest",
    ),
    "trainer.device": _verl("cluster.device", convert=_device),
    "actor_rollout_ref.actor.strategy": _verl(
        "actor.training_backend", convert=lambda v: _strategy("actor_rollout_ref.actor", v)
    ),
    "critic.strategy": _verl("critic.training_backend", convert=lambda v: _strategy("critic", v)),
    # FSDP2's CPU offload (CPUOffloadPolicy) moves the parameters, gradients and optimiser
    # state together: verl's three switches are one here, and must agree when several are set
    **{
        f"{section}.{switch}": _verl(
            target,
            note=OFFLOAD if switch != "offload_policy" else (note or ""),
            yields=REF_YIELDS if ".ref." in section else "",
        )
        for section, target, note in (
            ("actor_rollout_ref.actor.fsdp_config", "actor.fsdp.offload", ""),
            ("actor_rollout_ref.ref.fsdp_config", "actor.fsdp.offload", REF_AS_ACTOR),
            ("critic.fsdp", "critic.fsdp.offload", ""),  # (verl 0.9)
            ("critic.model.fsdp_config", "critic.fsdp.offload", ""),  # (earlier verl)
        )
        for switch in ("param_offload", "optimizer_offload", "offload_policy")
    },
    "trainer.logger": _verl(
        "logger.console",
        "logger.tensorboard",
        "logger.wandb",
        convert=loggers,
        note="each logger named is on, the others off",
    ),
}

# verl's dynamic batch size: ``use_dynamic_bsz`` switches on micro-batches of at most
# ``*_max_token_len_per_gpu`` tokens (verl's default when only the switch is given), which is the
# token budget here (``translate.verl_token_budgets`` reads each pair together). rlcore has one
# budget per trained model, for its update and its forward passes (old and reference log-probs).
TOKEN_BUDGETS: dict[str, tuple[tuple[str, str, int], ...]] = {
    "actor.max_tokens_per_micro_batch": (
        ("actor_rollout_ref.actor.use_dynamic_bsz", "ppo_max_token_len_per_gpu", 16384),
        ("actor_rollout_ref.ref.log_prob_use_dynamic_bsz", "log_prob_max_token_len_per_gpu", 16384),
        (
            "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz",
            "log_prob_max_token_len_per_gpu",
            16384,
        ),
    ),
    "critic.max_tokens_per_micro_batch": (
        ("critic.use_dynamic_bsz", "ppo_max_token_len_per_gpu", 32768),
        ("critic.use_dynamic_bsz", "forward_max_token_len_per_gpu", 32768),
    ),
}

# The micro-batch sizes in rows of each model with a token budget: verl ignores its micro-batch
# sizes under dynamic batching (its actor splits by tokens alone), so rlcore's give way to the
# budget that verl's switch sets (``translate.verl_token_budgets``).
ROW_MICRO_SIZES: dict[str, tuple[str, ...]] = {
    "actor": ("ppo_micro_batch_size", "log_prob_micro_batch_size"),
    "critic": ("ppo_micro_batch_size",),
}

# verl's switches for what rlcore always does one way: ``(values accepted, None for any, the line
# said, why another value is refused)`` (``translate.verl_fixed_choices``).
FIXED_CHOICES: dict[str, tuple[tuple[Any, ...] | None, str, str]] = {
    "data.filter_overlong_prompts": (
        (True,),
        "prompts longer than data.max_prompt_length are dropped here (said, counted), as verl's "
        "filter drops them",
        "a prompt longer than data.max_prompt_length is dropped here (said), never kept whole; "
        "give True, or raise data.max_prompt_length",
    ),
    "data.truncation": (
        ("error",),
        "no prompt is cut here: those longer than data.max_prompt_length are dropped (said)",
        "no prompt is cut here: those longer than data.max_prompt_length are dropped (said); give "
        "error, or raise data.max_prompt_length",
    ),
    "data.return_raw_chat": (
        (True, False),
        "the prompts' chat messages are kept and templated here (data.chat_template): not read",
        "",
    ),
    "actor_rollout_ref.rollout.load_format": (
        None,
        "how verl's engine loads its first weights; the rollout here starts from the actor's "
        "own: not read",
        "",
    ),
    "actor_rollout_ref.rollout.layered_summon": (
        (True, False),
        "how verl gathers LoRA weights for its engine (memory only); the rollout here "
        "generates with the actor's own module or receives its merged weights: not read",
        "",
    ),
    "actor_rollout_ref.model.fused_kernel_options.impl_backend": (
        ("torch",),
        "the fused log-probs (actor.model.use_fused_kernels) are torch code here, chunked by "
        "actor.entropy_from_logits_chunk_size: not read",
        "the fused log-probs (actor.model.use_fused_kernels) are torch code here, no triton "
        "kernel; give torch, or leave it out",
    ),
    "trainer.val_before_train": (
        (True, False),
        "a run validates before its first iteration here (the start of its curve), whatever "
        "this says: not read",
        "",
    ),
}

# verl keys with no counterpart whose refusal names the way on
WAYS_ON = {
    "trainer.total_epochs": "a run here is counted in iterations (one batch each): give "
    "trainer.total_training_steps (runner.total_iterations) instead",
    **{
        f"{section}.optim.lr_warmup_steps_ratio": "the warm-up here is a number of optimiser "
        f"steps: give lr_warmup_steps ({target}.optim.warmup_steps) instead"
        for section, target in (("actor_rollout_ref.actor", "actor"), ("critic", "critic"))
    },
}

# Top-level sections that only another framework has: a key under them that is not an alias
# gets "no rlcore counterpart" rather than a guess at a near rlcore key.
FOREIGN_SECTIONS = {
    "actor_rollout_ref": "verl",
    "actor_rollout": "verl",
    "trainer": "verl",
    "reward_model": "verl",
    "custom_reward_function": "verl",
    "ray_init": "verl",
    "async_training": "verl",  # (verl 0.9's fully_async_policy; foreign/verl_features.py)
}


def foreign_section(path: str) -> str | None:
    """The framework whose section ``path`` is in, when rlcore has no such section."""
    return FOREIGN_SECTIONS.get(path.split(".")[0])
