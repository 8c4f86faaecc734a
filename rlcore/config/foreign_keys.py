"""verl and RLinf spellings of options rlcore also has, for 'rlcore calls it ...' hints.

Keys are full paths as a verl or RLinf user would write them in an rlcore config; values are
rlcore key paths. docs/config.md holds the full mapping table, with the options that differ.
"""

FOREIGN_KEYS: dict[str, str] = {
    # verl: algorithm.*
    "algorithm.adv_estimator": "algorithm.adv_type",
    "algorithm.lam": "algorithm.gae_lambda",
    "algorithm.norm_adv_by_std_in_grpo": "algorithm.norm_adv_by_std",
    # verl: actor_rollout_ref.actor.* (rlcore keeps every algorithm knob in one section)
    "actor.clip_ratio": "algorithm.clip_ratio_low",
    "actor.clip_ratio_low": "algorithm.clip_ratio_low",
    "actor.clip_ratio_high": "algorithm.clip_ratio_high",
    "actor.clip_ratio_c": "algorithm.clip_ratio_c",
    "actor.loss_agg_mode": "algorithm.loss_agg_func",
    "actor.entropy_coeff": "algorithm.entropy_bonus",
    "actor.use_kl_loss": "algorithm.use_kl_loss",
    "actor.kl_loss_coef": "algorithm.kl_loss_coef",
    "actor.kl_loss_type": "algorithm.kl_loss_type",
    "critic.cliprange_value": "algorithm.value_clip",
    "algorithm.cliprange_value": "algorithm.value_clip",
    "algorithm.loss_agg_mode": "algorithm.loss_agg_func",
    "algorithm.entropy_coeff": "algorithm.entropy_bonus",
    "algorithm.clip_ratio": "algorithm.clip_ratio_low",
    # RLinf: embodied and reasoning configs
    "algorithm.update_epoch": "actor.ppo_epochs",
    "algorithm.value_loss_coef": "algorithm.value_coef",
    "algorithm.vf_coef": "algorithm.value_coef",
}
