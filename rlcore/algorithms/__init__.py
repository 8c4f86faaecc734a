"""rlcore.algorithms: the RL math both modes share, as pure tensor functions.

No I/O, no Ray, no config objects: ``[B, T]`` tensors and a 0/1 ``response_mask`` in, tensors out
(a loss's settings bound once in a frozen object, ``PPOLossSettings``).
For reasoning T counts response tokens; for embodied it counts time steps. See docs/algorithms.md
for the formulas and the papers they come from.
"""

from rlcore.algorithms.advantages import (
    ADVANTAGES,
    INPUTS,
    STANDARD_KWARGS,
    bootstrap_truncations,
    compute_advantages,
    compute_gae,
    compute_grpo_advantage,
    compute_reinforce_plus_plus_advantage,
    compute_reinforce_plus_plus_baseline_advantage,
    compute_rloo_advantage,
    get_advantage_fn,
    group_score_stats,
    register_advantage,
)
from rlcore.algorithms.aggregation import AGG_MODES, agg_loss, count_seqs, count_tokens
from rlcore.algorithms.kl import (
    KL_KINDS,
    AdaptiveKLController,
    FixedKLController,
    apply_kl_penalty,
    build_kl_controller,
    kl_penalty,
    scores_to_token_rewards,
)
from rlcore.algorithms.loss import LOSS_SHARES, PPOLossSettings, ppo_loss
from rlcore.algorithms.policy_loss import (
    POLICY_LOSSES,
    get_policy_loss_fn,
    policy_loss,
    register_policy_loss,
)
from rlcore.algorithms.stats import (
    entropy_from_log_probs,
    entropy_from_logits,
    explained_variance,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
)
from rlcore.algorithms.value_loss import value_loss

__all__ = [
    "ADVANTAGES",
    "AGG_MODES",
    "INPUTS",
    "KL_KINDS",
    "LOSS_SHARES",
    "POLICY_LOSSES",
    "STANDARD_KWARGS",
    "AdaptiveKLController",
    "FixedKLController",
    "PPOLossSettings",
    "agg_loss",
    "apply_kl_penalty",
    "bootstrap_truncations",
    "build_kl_controller",
    "compute_advantages",
    "compute_gae",
    "compute_grpo_advantage",
    "compute_reinforce_plus_plus_advantage",
    "compute_reinforce_plus_plus_baseline_advantage",
    "compute_rloo_advantage",
    "count_seqs",
    "count_tokens",
    "entropy_from_log_probs",
    "entropy_from_logits",
    "explained_variance",
    "get_advantage_fn",
    "get_policy_loss_fn",
    "group_score_stats",
    "kl_penalty",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "policy_loss",
    "ppo_loss",
    "register_advantage",
    "register_policy_loss",
    "scores_to_token_rewards",
    "value_loss",
]
