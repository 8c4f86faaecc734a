"""verl's and RLinf's spellings of rlcore keys, accepted as written (the seeds load unchanged).

An alias is a full key path as the other framework writes it (``actor_rollout_ref.rollout.n``,
``algorithm.lam``, ``algorithm.logprob_forward_micro_batch_size``). ``compose_raw`` rewrites each
one it finds, in the YAML or on the command line, to the rlcore key(s) it means and says so in one
line on stderr (``actor_rollout_ref.rollout.n is algorithm.group_size here``). An alias whose
meaning differs in a way that matters says how in the same line. verl keys with no rlcore
counterpart are refused by the validator with that reason (``foreign_section``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlcore.config.errors import ConfigError
from rlcore.did_you_mean import closest


@dataclass(frozen=True)
class Alias:
    """``origin``'s spelling of ``targets`` (usually one key; verl's ``clip_ratio`` sets both
    bounds). ``convert`` maps the value (to one value per target when there are several
    targets and it returns a tuple); ``note`` is said after the mapping on stderr."""

    origin: str
    targets: tuple[str, ...]
    convert: Callable[[Any], Any] | None = None
    note: str = ""

    def values(self, value: Any) -> list[tuple[str, Any]]:
        """``[(target, value)]`` for ``value`` written in this spelling."""
        converted = value if self.convert is None else self.convert(value)
        if len(self.targets) > 1 and isinstance(converted, tuple):
            return list(zip(self.targets, converted, strict=True))
        return [(target, converted) for target in self.targets]

    def describe(self, path: str) -> str:
        targets = " and ".join(self.targets)
        return f"{path} ({self.origin}) is {targets} here" + (f"; {self.note}" if self.note else "")


def _verl(*targets: str, convert: Callable[[Any], Any] | None = None, note: str = "") -> Alias:
    return Alias("verl", targets, convert, note)


def _rlinf(*targets: str, note: str = "") -> Alias:
    return Alias("RLinf", targets, None, note)


LOGGERS = ("console", "tensorboard", "wandb")


def _loggers(value: Any, key: str = "trainer.logger") -> tuple[bool, ...]:
    """verl's ``trainer.logger`` (RLinf's ``runner.logger.logger_backends``) list ->
    ``(logger.console, logger.tensorboard, logger.wandb)``."""
    if value is not None and not isinstance(value, str | list | tuple):
        raise ConfigError(f"{key}: {value!r}; give a list of loggers, e.g. [console,tensorboard]")
    names = [value] if isinstance(value, str) else list(value or [])
    unknown = [n for n in names if n not in LOGGERS]
    if unknown:
        raise ConfigError(
            f"{key}: {', '.join(map(str, unknown))} is not a logger here; rlcore writes "
            f"to {', '.join(LOGGERS)}"
        )
    return tuple(name in names for name in LOGGERS)


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


def _scheduler(value: Any) -> Any:
    """verl's ``lr_scheduler_type`` -> ``optim.decay``: constant and cosine are both here."""
    if value not in ("constant", "cosine"):
        raise ConfigError(
            f"lr_scheduler_type: {value!r} is not one of verl's constant, cosine (optim.decay "
            "here: constant, linear, cosine)"
        )
    return value


def _device(value: Any) -> Any:
    """verl's ``trainer.device`` -> ``cluster.device`` (cuda, cpu; no NPU here)."""
    if value not in ("cuda", "cpu"):
        raise ConfigError(f"trainer.device: {value!r}; rlcore runs on cuda or cpu (cluster.device)")
    return value


def _minus_one_is(off: int) -> Callable[[Any], Any]:
    return lambda value: off if value == -1 else value


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
ONE_ENV = "one env section here: RLinf's train and eval envs must agree"
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

ALIASES: dict[str, Alias] = {
    # verl: actor_rollout_ref.rollout.*
    "actor_rollout_ref.rollout.n": _verl("algorithm.group_size"),
    "actor_rollout.ref.rollout.n": _verl(
        "algorithm.group_size", note="verl's PPO page spells actor_rollout_ref so"
    ),
    "actor_rollout_ref.rollout.name": _verl("rollout.backend"),
    "actor_rollout_ref.rollout.calculate_log_probs": _verl("rollout.calculate_log_probs"),
    "actor_rollout_ref.rollout.temperature": _verl("rollout.temperature"),
    "actor_rollout_ref.rollout.top_p": _verl("rollout.top_p"),
    "actor_rollout_ref.rollout.val_kwargs.n": _verl(
        "runner.val_n",
        note="validation samples besides the greedy answer, which is always taken",
    ),
    "actor_rollout_ref.rollout.val_kwargs.temperature": _verl("rollout.val_temperature"),
    "actor_rollout_ref.rollout.val_kwargs.top_p": _verl("rollout.val_top_p"),
    "actor_rollout_ref.rollout.val_kwargs.top_k": _verl(
        "rollout.val_top_k", convert=_minus_one_is(0), note="verl's -1 (no limit) is 0"
    ),
    "actor_rollout_ref.rollout.top_k": _verl(
        "rollout.top_k", convert=_minus_one_is(0), note="verl's -1 (no limit) is 0"
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
    "actor_rollout_ref.model.enable_gradient_checkpointing": _verl(
        "actor.model.gradient_checkpointing"
    ),
    "actor_rollout_ref.model.use_remove_padding": _verl("actor.model.use_remove_padding"),
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
        "actor.optim.warmup_steps", convert=_minus_one_is(0), note=WARMUP
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
        convert=_minus_one_is(0),
        note="0 (verl's -1) still validates before and after training",
    ),
    "trainer.save_freq": _verl(
        "runner.checkpoint_every", convert=_minus_one_is(0), note="verl's -1 (never) is 0"
    ),
    "trainer.critic_warmup": _verl("critic.critic_warmup"),
    "trainer.experiment_name": _verl("runner.run_name"),
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
            target, note=OFFLOAD if switch != "offload_policy" else (note or "")
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
        convert=_loggers,
        note="each logger named is on, the others off",
    ),
    # RLinf: runner.* and runner.logger.*
    "runner.val_check_interval": Alias(
        "RLinf", ("runner.eval_every",), _minus_one_is(0), "RLinf's -1 (never) is 0"
    ),
    "runner.save_interval": Alias(
        "RLinf", ("runner.checkpoint_every",), _minus_one_is(0), "RLinf's -1 (never) is 0"
    ),
    "runner.logger.experiment_name": _rlinf("runner.run_name"),
    "runner.logger.log_path": _rlinf(
        "runner.output_dir", note="a run is written to OUTPUT_DIR/RUN_NAME"
    ),
    "runner.logger.logger_backends": Alias(
        "RLinf",
        ("logger.console", "logger.tensorboard", "logger.wandb"),
        lambda value: _loggers(value, "runner.logger.logger_backends"),
        "each backend named is on, the others off",
    ),
    "actor.optim.clip_grad": _rlinf("actor.optim.max_grad_norm"),
    # RLinf: env.train.* and env.eval.* (one env section here: the two must agree)
    **{
        f"env.{split}.{key}": _rlinf(target, note=ONE_ENV)
        for split in ("train", "eval")
        for key, target in (
            ("total_num_envs", "env.num_envs"),
            ("ignore_terminations", "env.kwargs.ignore_terminations"),
            ("reward_mode", "env.kwargs.reward_mode"),
            ("max_episode_steps", "env.kwargs.max_episode_steps"),
            ("init_params.obs_mode", "env.kwargs.obs_mode"),
            ("init_params.control_mode", "env.kwargs.control_mode"),
            ("init_params.sim_backend", "env.kwargs.sim_backend"),
            ("init_params.max_episode_steps", "env.kwargs.max_episode_steps"),
        )
        if not (split == "eval" and key == "total_num_envs")  # (runner.eval_episodes here)
    },
    # RLinf: algorithm.* (the rest of RLinf's PPO block is spelled as in rlcore)
    "algorithm.rollout_micro_batch_size": _rlinf("rollout.micro_batch_size"),
    "algorithm.logprob_forward_micro_batch_size": _rlinf("actor.log_prob_micro_batch_size"),
    "algorithm.update_epoch": _rlinf("actor.ppo_epochs"),
    "algorithm.ratio_clip_eps": _rlinf("algorithm.clip_ratio_low", "algorithm.clip_ratio_high"),
}

# verl's dynamic batch size: ``use_dynamic_bsz`` switches on micro-batches of at most
# ``*_max_token_len_per_gpu`` tokens (verl's default when only the switch is given), which is the
# token budget here (rlcore.load.verl_token_budgets reads each pair together). rlcore has one
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

# rlcore's own earlier spellings (before one optimiser section served every component)
EARLIER = "rlcore's earlier key"
ALIASES |= {
    "actor.optim.lr_schedule": Alias(EARLIER, ("actor.optim.decay",)),
    "actor.optim.adam_eps": Alias(EARLIER, ("actor.optim.eps",)),
    "actor.optim.lr_warmup_steps": Alias(EARLIER, ("actor.optim.warmup_steps",)),
    # (verl's spelling too, where -1 is no fixed warm-up)
    "critic.optim.lr_warmup_steps": Alias(
        EARLIER, ("critic.optim.warmup_steps",), _minus_one_is(0), "also verl's: -1 is 0"
    ),
}

# rlcore's earlier flat reward section, now in subsections by kind (reward.rules, .model,
# .judge, .remote): each flat key -> the key it is now
REWARD_KEYS = {
    "gsm8k_mode": "rules.gsm8k_mode",
    "correct_score": "rules.correct_score",
    "format_score": "rules.format_score",
    "custom_fn": "rules.custom_fn",
    "timeout_s": "rules.timeout_s",
    "num_processes": "rules.num_processes",
    "max_timeout_share": "rules.max_timeout_share",
    "batch_timeout_s": "rules.batch_timeout_s",
    "model_path": "model.path",
    "model_micro_batch_size": "model.micro_batch_size",
    "model_backend": "model.backend",
    "score_normalize": "model.score_normalize",
    "score_clip": "model.score_clip",
    "rule": "model.rule",
    "combine": "model.combine",
    "model_weight": "model.model_weight",
    "rule_weight": "model.rule_weight",
    "judge_template": "judge.template",
    "judge_parser": "judge.parser",
    "judge_max_new_tokens": "judge.max_new_tokens",
    "judge_backend": "judge.backend",
    "url": "remote.url",
    "remote_batch_size": "remote.batch_size",
    "remote_concurrency": "remote.concurrency",
    "remote_timeout_s": "remote.timeout_s",
    "remote_retries": "remote.retries",
    "on_error": "remote.on_error",
}
ALIASES |= {
    f"reward.{flat}": Alias(EARLIER, (f"reward.{now}",)) for flat, now in REWARD_KEYS.items()
}


@dataclass(frozen=True)
class DerivedKey:
    """rlcore's earlier key for a value that now follows from the mode (``config.derived``):
    accepted when it says what the mode does (with one line on stderr), else refused with
    ``refusal``. ``legal``: the one value each mode accepts (a mode left out has no such key)."""

    derived: str
    legal: dict[str, Any]
    refusal: dict[str, str]

    def check(self, path: str, value: Any, mode: Any) -> str:
        """The line to say for ``value`` in ``mode``; ``ConfigError`` if it contradicts it."""
        shown = str(value).lower() if isinstance(value, bool) else value
        known = sorted({str(v).lower() if isinstance(v, bool) else v for v in self.legal.values()})
        if isinstance(value, str) and value not in known:
            near = closest(value, known)
            hint = f" (did you mean '{near[0]}'?)" if near else ""
            raise ConfigError(
                f"{path}: {value!r} is not one of {', '.join(known)}{hint}; it follows from the "
                "mode: leave it out"
            )
        if mode in self.legal and value == self.legal[mode]:
            return (
                f"{path} ({EARLIER}) is {self.derived} here, which follows from the mode "
                f"({mode}: {shown}); leave it out"
            )
        raise ConfigError(f"{path}: {shown}; {self.refusal.get(mode, self.refusal['other'])}")


DERIVED_KEYS: dict[str, DerivedKey] = {
    "algorithm.loss_type": DerivedKey(
        "derived.loss_type",
        {"embodied": "actor_critic", "reasoning": "actor"},
        {
            "embodied": "embodied mode trains the policy and its value head together "
            "(actor_critic); a policy without a value head is not built: leave loss_type out",
            "reasoning": "reasoning mode trains a separate critic model, so the actor and "
            "critic cannot share one backward pass (loss_type actor): leave loss_type out",
            "other": "follows from the mode (embodied: actor_critic, reasoning: actor); leave "
            "it out",
        },
    ),
    "actor.model.add_value_head": DerivedKey(
        "derived.value_head",
        {"embodied": True},
        {
            "embodied": "embodied mode trains the policy and its value head together "
            "(actor_critic); leave add_value_head out: the policy always has one",
            "other": "the reasoning policy has no value head (its critic is a separate model, "
            "critic.*); leave add_value_head out",
        },
    ),
}


def current_keys(saved: dict[str, Any]) -> dict[str, Any]:
    """A config as a run folder keeps it (``dataclasses.asdict`` of a validated config, written
    by this version or an earlier one) in this version's keys, to validate again: its
    ``derived`` section left out (computed anew), rlcore's earlier keys renamed
    (``actor.optim.lr_schedule`` ...) or, for values that now follow from the mode
    (``DERIVED_KEYS``), dropped. ``saved`` itself is not changed."""
    out = copy.deepcopy(saved)
    out.pop("derived", None)
    for path, alias in ALIASES.items():
        if alias.origin == EARLIER and _pop(out, path) is not _MISSING:
            value = _get(saved, path)
            for target, converted in alias.values(value):
                _put(out, target, converted)
    for path in DERIVED_KEYS:
        _pop(out, path)
    return out


_MISSING = object()


def _get(tree: dict[str, Any], path: str) -> Any:
    for part in path.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return _MISSING
        tree = tree[part]
    return tree


def _pop(tree: dict[str, Any], path: str) -> Any:
    *parents, leaf = path.split(".")
    for part in parents:
        tree = tree.get(part) if isinstance(tree, dict) else None
        if not isinstance(tree, dict):
            return _MISSING
    return tree.pop(leaf, _MISSING)


def _put(tree: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    for part in parents:
        tree = tree.setdefault(part, {})
    tree[leaf] = value


# Top-level sections that only another framework has: a key under them that is not an alias
# gets "no rlcore counterpart" rather than a guess at a near rlcore key.
FOREIGN_SECTIONS = {
    "actor_rollout_ref": "verl",
    "actor_rollout": "verl",
    "trainer": "verl",
    "reward_model": "verl",
    "custom_reward_function": "verl",
    "ray_init": "verl",
}


def foreign_section(path: str) -> str | None:
    """The framework whose section ``path`` is in, when rlcore has no such section."""
    return FOREIGN_SECTIONS.get(path.split(".")[0])
