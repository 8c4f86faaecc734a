"""RLinf's spellings of rlcore keys (its embodied PPO examples), accepted as written: each full
key path, the rlcore key(s) it means. RLinf's keys with no rlcore counterpart are refused by the
validator with that reason (``key_lists.RLINF_KEYS``).
"""

from __future__ import annotations

from rlcore.config.foreign.alias import Alias, loggers, minus_one_is

ONE_ENV = "one env section here: RLinf's train and eval envs must agree"


def _rlinf(*targets: str, note: str = "") -> Alias:
    return Alias("RLinf", targets, None, note)


RLINF_ALIASES: dict[str, Alias] = {
    # RLinf: runner.* and runner.logger.*
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
    "runner.logger.logger_backends": Alias(
        "RLinf",
        ("logger.console", "logger.tensorboard", "logger.wandb"),
        lambda value: loggers(value, "runner.logger.logger_backends"),
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
