"""RLinf's spellings of rlcore keys (its embodied PPO examples), accepted as written: each full
key path, the rlcore key(s) it means. The keys read in context (the env's id from its type and
task, the run's length, the switches for what rlcore always does one way) are
``rlinf_read.py``'s; RLinf's keys with neither are refused by the validator with that reason
(``key_lists.RLINF_KEYS``).
"""

from __future__ import annotations

from typing import Any

from rlcore.config.errors import ConfigError
from rlcore.config.foreign.alias import Alias, loggers, minus_one_is

ONE_ENV = "one env section here: RLinf's train and eval envs must agree"
SPLITS = ("train", "eval")


def _rlinf(*targets: str, note: str = "") -> Alias:
    return Alias("RLinf", targets, None, note)


def _task_type(value: Any) -> str:
    """RLinf's ``runner.task_type`` -> ``mode``: its embodied and reasoning runners are rlcore's
    two modes."""
    if value not in ("embodied", "reasoning"):
        raise ConfigError(
            f"runner.task_type: {value!r}; rlcore runs embodied and reasoning tasks (its two "
            "modes), so give one of those"
        )
    return value


RLINF_ALIASES: dict[str, Alias] = {
    # RLinf: runner.* and runner.logger.*
    "runner.task_type": Alias("RLinf", ("mode",), _task_type),
    "runner.val_check_interval": Alias(
        "RLinf", ("runner.eval_every",), minus_one_is(0), "RLinf's -1 (never) is 0"
    ),
    "runner.save_interval": Alias(
        "RLinf", ("runner.checkpoint_every",), minus_one_is(0), "RLinf's -1 (never) is 0"
    ),
    "runner.logger.experiment_name": _rlinf("runner.run_name"),
    "runner.logger.log_path": _rlinf(
        "runner.output_dir", note="a run is written to OUTPUT_DIR/RUN_NAME"
    ),
    "runner.logger.project_name": _rlinf("logger.project"),
    "runner.logger.logger_backends": Alias(
        "RLinf",
        ("logger.console", "logger.tensorboard", "logger.wandb"),
        lambda value: loggers(value, "runner.logger.logger_backends"),
        "each backend named is on, the others off",
    ),
    "actor.optim.clip_grad": _rlinf("actor.optim.max_grad_norm"),
    # RLinf's embodied actor: global_batch_size transitions per optimiser step over all ranks,
    # micro_batch_size per forward/backward pass on one rank (its embodied_fsdp_actor_worker)
    "actor.global_batch_size": _rlinf("actor.ppo_mini_batch_size"),
    "actor.micro_batch_size": _rlinf("actor.ppo_micro_batch_size"),
    # RLinf: env.train.* and env.eval.* (one env section here: the two must agree)
    **{
        f"env.{split}.{key}": _rlinf(target, note=ONE_ENV)
        for split in SPLITS
        for key, target in (
            ("total_num_envs", "env.num_envs"),
            ("ignore_terminations", "env.kwargs.ignore_terminations"),
            ("max_episode_steps", "env.kwargs.max_episode_steps"),
            ("init_params.reward_mode", "env.kwargs.reward_mode"),
            ("init_params.obs_mode", "env.kwargs.obs_mode"),
            ("init_params.control_mode", "env.kwargs.control_mode"),
            ("init_params.sim_backend", "env.kwargs.sim_backend"),
            ("init_params.max_episode_steps", "env.kwargs.max_episode_steps"),
            ("init_params.sim_config.sim_freq", "env.kwargs.sim_config.sim_freq"),
            ("init_params.sim_config.control_freq", "env.kwargs.sim_config.control_freq"),
        )
        if not (split == "eval" and key == "total_num_envs")  # (runner.eval_episodes here)
    },
    "env.train.max_steps_per_rollout_epoch": _rlinf("runner.rollout_steps"),
    "env.eval.total_num_envs": _rlinf(
        "runner.eval_episodes",
        note="an evaluation here runs that many whole episodes (RLinf's eval envs, one "
        "episode each)",
    ),
    # RLinf: algorithm.* (the rest of RLinf's PPO block is spelled as in rlcore)
    "algorithm.rollout_micro_batch_size": _rlinf("rollout.micro_batch_size"),
    "algorithm.logprob_forward_micro_batch_size": _rlinf("actor.log_prob_micro_batch_size"),
    "algorithm.update_epoch": _rlinf("actor.ppo_epochs"),
    "algorithm.ratio_clip_eps": _rlinf("algorithm.clip_ratio_low", "algorithm.clip_ratio_high"),
}


ANY = None
SPEED = (
    "RLinf's engine settings for speed and memory (FSDP's prefetching, resharding and "
    "offload, compilation, CUDA graphs, offloading between stages, its weight syncer's "
    "patches) change no number of the update: not read"
)
FP32 = ("32", 32, "fp32", "float32", None)
VIDEO = "env.*.video_cfg (RLinf): rlcore writes no videos (evaluations are metrics): not read"
SEED = "RLinf's actor and env seeds: one seed here (runner.seed): not read"


def _fixed(accepted: tuple[Any, ...] | None, line: str, refusal: str = "") -> tuple:
    return (accepted, line, refusal)


# RLinf's switches for what rlcore always does one way: path -> (the values accepted, None for
# any; the line said then; why another is refused). Read by rlinf_read.rlinf_in_context.
RLINF_FIXED: dict[str, tuple[tuple[Any, ...] | None, str, str]] = {
    **{
        f"actor.fsdp_config.{key}": _fixed(ANY, SPEED)
        for key in (
            "gradient_checkpointing",
            "cpu_offload",
            "offload_pin_memory",
            "reshard_after_forward",
            "enable_gradient_accumulation",
            "forward_prefetch",
            "limit_all_gathers",
            "backward_prefetch",
            "use_orig_params",
            "use_liger_kernel",
        )
    },
    **{
        f"actor.fsdp_config.mixed_precision.{key}": _fixed(
            FP32,
            "actor.fsdp_config.mixed_precision (RLinf): float32, as the embodied policy trains "
            "here",
            "the embodied policy trains in float32 here; give 32 (or null)",
        )
        for key in ("param_dtype", "reduce_dtype", "buffer_dtype")
    },
    "actor.fsdp_config.amp_autocast.enabled": _fixed(
        (False,), SPEED, "the embodied policy trains in float32 here, without autocast"
    ),
    "actor.fsdp_config.amp_autocast.precision": _fixed(ANY, SPEED),
    "actor.fsdp_config.grad_scaler.enabled": _fixed(
        (False,), SPEED, "no gradient scaling here (float32 training)"
    ),
    **{
        f"{c}.model.precision": _fixed(
            FP32,
            "actor.model.precision, rollout.model.precision (RLinf): float32, as here",
            "the embodied policy acts and trains in float32 here; give 32",
        )
        for c in ("actor", "rollout")
    },
    **{
        f"{c}.model.model_path": _fixed(
            ("", None),
            "actor.model.model_path (RLinf) empty: the MLP starts from fresh weights, as here",
            "the embodied MLP starts from fresh weights here; a run resumes from its "
            "checkpoint with runner.resume_dir",
        )
        for c in ("actor", "rollout")
    },
    "actor.model.policy_setup": _fixed(
        ANY, "actor.model.policy_setup (RLinf) is read by RLinf's VLA policies only: not read"
    ),
    "actor.model.obs_dim": _fixed(
        ANY, "actor.model.obs_dim/action_dim (RLinf): from the env's spaces here: not read"
    ),
    "actor.model.action_dim": _fixed(
        ANY, "actor.model.obs_dim/action_dim (RLinf): from the env's spaces here: not read"
    ),
    "actor.model.num_action_chunks": _fixed(
        (1,),
        "actor.model.num_action_chunks: 1 (RLinf): one action per step, as here",
        "the policy here acts one step at a time (no action chunks); give 1",
    ),
    "actor.model.is_lora": _fixed(
        (False,),
        "actor.model.is_lora/lora_rank (RLinf): the whole MLP trains, as here",
        "LoRA adapters are for the LM policy here (actor.model.lm.lora_rank), not the MLP",
    ),
    "actor.model.lora_rank": _fixed(
        ANY, "actor.model.is_lora/lora_rank (RLinf): the whole MLP trains, as here"
    ),
    "actor.optim.adam_beta1": _fixed(
        (0.9,),
        "actor.optim.adam_beta1/2 (RLinf): torch's 0.9 and 0.999, as here",
        "the optimiser takes torch's betas here (0.9, 0.999)",
    ),
    "actor.optim.adam_beta2": _fixed(
        (0.999,),
        "actor.optim.adam_beta1/2 (RLinf): torch's 0.9 and 0.999, as here",
        "the optimiser takes torch's betas here (0.9, 0.999)",
    ),
    "actor.seed": _fixed(ANY, SEED),
    **{f"{c}.enable_offload": _fixed(ANY, SPEED) for c in ("actor", "rollout")},
    "rollout.backend": _fixed(
        ("huggingface",),
        "rollout.backend: huggingface (RLinf): the rollout acts with the actor's own policy, "
        "as here",
        "the embodied rollout acts with the actor's own policy here (RLinf's huggingface)",
    ),
    "rollout.enable_torch_compile": _fixed(ANY, SPEED),
    "rollout.enable_cuda_graph": _fixed(ANY, SPEED),
    "runner.only_eval": _fixed(
        (False,),
        "runner.only_eval: False (RLinf): a training run, as here",
        "rlcore has no evaluation-only run",
    ),
    "runner.ckpt_path": _fixed(
        (None,),
        "runner.ckpt_path: null (RLinf): nothing to load, as here",
        "loading a policy's weights alone is not offered here; runner.resume_dir resumes a "
        "whole run",
    ),
    **{
        f"algorithm.{key}": _fixed(
            ("action_level",),
            "algorithm.reward_type/logprob_type/entropy_type: action_level (RLinf): one reward, "
            "log-prob and entropy per action step, as here",
            "the policy here acts one step at a time (no action chunks or tokens): give "
            "action_level",
        )
        for key in ("reward_type", "logprob_type", "entropy_type")
    },
    "algorithm.kl_beta": _fixed(
        (0, 0.0),
        "algorithm.kl_beta: 0 (RLinf): no KL term in the embodied loss, as here",
        "the embodied loss has no KL term here (no reference policy); give 0",
    ),
    "reward.use_reward_model": _fixed(
        (False,),
        "reward.use_reward_model: False (RLinf): the env's reward, as here",
        "embodied rewards come from the env here",
    ),
    **{
        f"env.{s}.{key}": entry
        for s in SPLITS
        for key, entry in (
            (
                "auto_reset",
                _fixed(
                    (True,),
                    "env.*.auto_reset: True (RLinf): an episode restarts as it ends, as here",
                    "the envs here restart each episode as it ends (next-step autoreset); give "
                    "True",
                ),
            ),
            (
                "use_rel_reward",
                _fixed(
                    (False,),
                    "env.*.use_rel_reward: False (RLinf): the step's own reward, as here",
                    "the rewards here are the env's own, not their differences; give False",
                ),
            ),
            (
                "wrap_obs_mode",
                _fixed(
                    ("simple",),
                    "env.*.wrap_obs_mode: simple (RLinf): the flat state is the policy's input, "
                    "as here",
                    "the policy here reads the env's flat state (simple)",
                ),
            ),
            (
                "use_full_state",
                _fixed(
                    (False,),
                    "env.*.use_full_state: False (RLinf): the task's state observation, as here",
                    "the observation here is the task's own (env.kwargs.obs_mode)",
                ),
            ),
            ("seed", _fixed(ANY, SEED)),
            ("enable_offload", _fixed(ANY, SPEED)),
            (
                "init_params.num_envs",
                _fixed(ANY, "env.*.init_params.num_envs (RLinf): env.num_envs here: not read"),
            ),
            ("init_params.render_mode", _fixed(ANY, VIDEO)),
            ("init_params.sensor_configs.shader_pack", _fixed(ANY, VIDEO)),
            ("video_cfg.save_video", _fixed(ANY, VIDEO)),
            ("video_cfg.info_on_video", _fixed(ANY, VIDEO)),
            ("video_cfg.video_base_dir", _fixed(ANY, VIDEO)),
        )
    },
    "env.train.rollout_epoch": _fixed(
        (1,),
        "env.train.rollout_epoch: 1 (RLinf): one rollout per iteration, as here",
        "one rollout per iteration here: make runner.rollout_steps "
        "(env.train.max_steps_per_rollout_epoch) that many times longer and give 1",
    ),
    "env.train.use_fixed_reset_state_ids": _fixed(
        (False,),
        "env.train.use_fixed_reset_state_ids: False (RLinf): fresh resets, as here",
        "training envs here reset from fresh seeds; give False",
    ),
    "env.eval.rollout_epoch": _fixed(
        ANY,
        "env.eval's rollout_epoch, max_steps_per_rollout_epoch and reset states (RLinf): "
        "an evaluation here runs runner.eval_episodes whole episodes: not read",
    ),
    "env.eval.max_steps_per_rollout_epoch": _fixed(
        ANY,
        "env.eval's rollout_epoch, max_steps_per_rollout_epoch and reset states (RLinf): "
        "an evaluation here runs runner.eval_episodes whole episodes: not read",
    ),
    "env.eval.use_fixed_reset_state_ids": _fixed(
        ANY,
        "env.eval's rollout_epoch, max_steps_per_rollout_epoch and reset states (RLinf): "
        "an evaluation here runs runner.eval_episodes whole episodes: not read",
    ),
    **{
        f"weight_syncer.{key}": _fixed(ANY, SPEED)
        for key in (
            "type",
            "patch.snapshot_device",
            "patch.delta_encoding",
            "patch.compression",
            "patch.init_sync.enabled",
            "patch.init_sync.prefixes",
            "patch.init_sync.bucket_size",
        )
    },
}
