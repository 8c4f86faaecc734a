"""Near-misses: other frameworks' option names written under rlcore's sections, for "rlcore calls
it ..." hints. They are not accepted: unlike the full verl and RLinf paths in ``verl.py`` and
``rlinf.py`` (which are), these are guesses at where an option might live, so the user is shown
the key.

Keys are paths as a verl, RLinf or CleanRL/Stable-Baselines3 user might write them in an rlcore
config; values are rlcore key paths.
"""

FOREIGN_KEYS: dict[str, str] = {
    # verl: actor_rollout_ref.actor.* and critic.* (rlcore keeps every algorithm knob together)
    "actor.clip_ratio": "algorithm.clip_ratio_low",
    "actor.clip_ratio_low": "algorithm.clip_ratio_low",
    "actor.clip_ratio_high": "algorithm.clip_ratio_high",
    "actor.clip_ratio_c": "algorithm.clip_ratio_c",
    "actor.loss_agg_mode": "algorithm.loss_agg_func",
    "actor.entropy_coeff": "algorithm.entropy_bonus",
    "actor.use_kl_loss": "algorithm.use_kl_loss",
    "actor.kl_loss_coef": "algorithm.kl_loss_coef",
    "actor.kl_loss_type": "algorithm.kl_loss_type",
    # the same verl names written under algorithm
    "algorithm.clip_ratio": "algorithm.clip_ratio_low",
    "algorithm.loss_agg_mode": "algorithm.loss_agg_func",
    "algorithm.entropy_coeff": "algorithm.entropy_bonus",
    "algorithm.cliprange_value": "algorithm.value_clip",
    "algorithm.ppo_epochs": "actor.ppo_epochs",
    # verl: actor_rollout_ref.* options written under rlcore's sections
    "rollout.n": "algorithm.group_size",
    "rollout.name": "rollout.backend",
    "rollout.response_length": "data.max_response_length",
    "rollout.prompt_length": "data.max_prompt_length",
    "actor.ppo_micro_batch_size_per_gpu": "actor.ppo_micro_batch_size",
    "model.path": "actor.model.path",
    # CleanRL / Stable-Baselines3
    "algorithm.update_epochs": "actor.ppo_epochs",
    "algorithm.n_epochs": "actor.ppo_epochs",
    "algorithm.clip_coef": "algorithm.clip_ratio_low",
    "algorithm.ent_coef": "algorithm.entropy_bonus",
    "algorithm.vf_coef": "algorithm.value_coef",
    "algorithm.norm_adv": "algorithm.normalize_advantages",
    "env.env_id": "env.id",
    "runner.num_steps": "runner.rollout_steps",
    "runner.n_steps": "runner.rollout_steps",
}
