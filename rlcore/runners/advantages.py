"""Each driver's advantages step, from its batch and the ``algorithm`` section to the
estimators of ``rlcore.algorithms``: a batch gains ``advantages`` and ``returns`` in place.

- embodied: truncated episodes (with ``bootstrap_type: always``, terminated ones too) bootstrap
  from ``V(s_final)``, then the estimator (GAE) runs over the valid steps of each env's row,
  episode ends inside it;
- reasoning: each response's score on its last token, minus ``kl_coef * KL(actor || ref)`` on
  every token with ``use_kl_in_reward``, then the estimator over the groups (with the inputs
  it reads: values, ReMax's greedy baselines, GDPO's reward components ...).

Both whiten the advantages when ``normalize_advantages`` (``compute_advantages``).
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from rlcore.algorithms import (
    INPUTS,
    AdaptiveKLController,
    FixedKLController,
    apply_kl_penalty,
    bootstrap_truncations,
    compute_advantages,
    kl_penalty,
    masked_mean,
    scores_to_token_rewards,
)
from rlcore.algorithms.rollout_correction import rollout_correction
from rlcore.columns import (
    ADVANTAGES,
    INDEX,
    LAST_VALUE,
    LOSS_MASK,
    OLD_LOG_PROBS,
    REF_LOG_PROBS,
    RETURNS,
    REWARD_COMPONENT_WEIGHTS,
    REWARD_COMPONENTS,
    REWARDS,
    ROLLOUT_IS_WEIGHTS,
    ROLLOUT_LOG_PROBS,
    SCORES,
    TERMINATED,
    TRUNCATED,
    VALUES,
)
from rlcore.config.sections import AlgorithmConfig

KLController = FixedKLController | AdaptiveKLController


def embodied_advantages(alg: AlgorithmConfig, batch: TensorDict) -> None:
    """``batch``: ``[N]`` rows of ``[N, T]`` steps, with the rollout's ``values`` and each row's
    ``last_value`` (of the observation after its last step). With ``algorithm.group_size`` > 1
    each row is one episode (its valid steps) and rows ``g*G .. g*G+G-1`` a group reset alike:
    the group estimator scores each by its summed rewards, its return (``group_advantages``)."""
    if alg.group_size > 1:
        group_advantages(alg, batch)
        return
    values = torch.cat([batch[VALUES], batch[LAST_VALUE][:, None]], dim=1)  # [N, T + 1]
    terminated, truncated = batch[TERMINATED], batch[TRUNCATED]
    rewards = bootstrap_truncations(
        batch[REWARDS],
        values[:, 1:],
        terminated,
        truncated,
        alg.gamma,
        at_termination=alg.bootstrap_type == "always",
    )
    batch[ADVANTAGES], batch[RETURNS] = compute_advantages(
        alg.adv_type,
        rewards,
        batch[LOSS_MASK],
        normalize=alg.normalize_advantages,
        values=values,
        gamma=alg.gamma,
        lam=alg.gae_lambda,
        norm_adv_by_std=alg.norm_adv_by_std,
        dones=terminated | truncated,
    )


def group_advantages(alg: AlgorithmConfig, batch: TensorDict) -> None:
    """Embodied GRPO: the group estimator over the rows' episodes (no value, no bootstrap: an
    episode the collection cut off scores the rewards it got)."""
    rows = batch[REWARDS].shape[0]
    batch[ADVANTAGES], batch[RETURNS] = compute_advantages(
        alg.adv_type,
        batch[REWARDS],
        batch[LOSS_MASK],
        normalize=alg.normalize_advantages,
        index=torch.arange(rows) // alg.group_size,
        gamma=alg.gamma,
        lam=alg.gae_lambda,
        norm_adv_by_std=alg.norm_adv_by_std,
    )


def reasoning_advantages(
    alg: AlgorithmConfig, kl_ctrl: KLController, batch: TensorDict, scored: TensorDict
) -> dict[str, float]:
    """``batch``: ``[B]`` responses with their ``old_log_probs`` (and ``ref_log_probs``,
    ``values`` ... as the estimator reads them); ``scored``: the reward's rows. The KL metrics
    (``kl/to_ref``, ``kl/coef``); ``kl_ctrl`` (fixed or adaptive) steps with the KL it saw."""
    metrics: dict[str, float] = {}
    mask = batch[LOSS_MASK]  # the model's own tokens (tool tokens are context)
    rewards = scores_to_token_rewards(scored[SCORES], mask)
    if REF_LOG_PROBS in batch:
        old, ref = batch[OLD_LOG_PROBS], batch[REF_LOG_PROBS]
        metrics["kl/to_ref"] = float(masked_mean(kl_penalty(old, ref, alg.kl_penalty), mask))
        if alg.use_kl_in_reward:
            metrics["kl/coef"] = kl_ctrl.value
            rewards, _ = apply_kl_penalty(rewards, old, ref, mask, kl_ctrl, alg.kl_penalty)
    if ROLLOUT_LOG_PROBS in batch:  # sampled by another policy than the recomputed old one
        mask = _correct(alg, batch, metrics)
    inputs = {name: batch[name] for name in INPUTS if name in batch}
    if REWARD_COMPONENTS in scored:  # GDPO's
        weights = alg.gdpo_reward_weights or [1.0] * len(alg.gdpo_reward_keys)
        inputs[REWARD_COMPONENTS] = scored[REWARD_COMPONENTS]
        inputs[REWARD_COMPONENT_WEIGHTS] = torch.tensor(weights)
    batch[ADVANTAGES], batch[RETURNS] = compute_advantages(
        alg.adv_type,
        rewards,
        mask,
        normalize=alg.normalize_advantages,
        values=batch.get(VALUES),
        index=batch[INDEX],
        gamma=alg.gamma,
        lam=alg.gae_lambda,
        norm_adv_by_std=alg.norm_adv_by_std,
        inputs=inputs,
    )
    return metrics


def corrected(
    alg: AlgorithmConfig, old: torch.Tensor, rollout: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor | None, torch.Tensor, dict[str, float]]:
    """``rollout_correction`` with ``algorithm.rollout_correction``'s settings, both modes:
    the weights (None without ``rollout_is``), the mask after rejection, the metrics."""
    corr = alg.rollout_correction
    return rollout_correction(
        old,
        rollout,
        mask,
        rollout_is=corr.rollout_is,
        rollout_is_threshold=corr.rollout_is_threshold,
        rollout_is_batch_normalize=corr.rollout_is_batch_normalize,
        rollout_rs=corr.rollout_rs,
        rollout_rs_threshold=corr.rollout_rs_threshold,
    )


def _correct(alg: AlgorithmConfig, batch: TensorDict, metrics: dict[str, float]) -> torch.Tensor:
    """The rollout correction on ``batch``: ``rollout_is_weights`` added, ``loss_mask``
    without the rejected tokens (returned), the ``rollout_corr/`` metrics."""
    weights, mask, found = corrected(
        alg, batch[OLD_LOG_PROBS], batch[ROLLOUT_LOG_PROBS], batch[LOSS_MASK]
    )
    metrics.update(found)
    if weights is not None:
        batch[ROLLOUT_IS_WEIGHTS] = weights
    batch[LOSS_MASK] = mask
    return mask
