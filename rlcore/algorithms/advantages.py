"""Advantage estimators: ``(token_level_rewards, response_mask, **standard kwargs) -> (A, R)``.

Every estimator takes ``[B, T]`` rewards and a 0/1 ``response_mask`` (T is tokens for reasoning,
time steps for embodied) and returns ``(advantages, returns)``, both ``[B, T]`` and 0 at masked
positions. They are called with the keyword arguments in ``STANDARD_KWARGS`` (an estimator ignores
those it does not use), so the runner can switch estimators by name (``algorithm.adv_type``).

Group-based estimators group rows by ``index`` (one id per row: ints, strings, or a 1-D tensor);
rows with equal ids answer the same prompt or start from the same state.

Add your own::

    @register_advantage("my_adv")
    def my_adv(token_level_rewards, response_mask, *, values=None, index=None, gamma=1.0,
               lam=1.0, epsilon=1e-6, norm_adv_by_std=True):
        ...
        return advantages, returns
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from rlcore.algorithms.registry import Registry
from rlcore.algorithms.stats import masked_whiten
from rlcore.columns import (
    OLD_LOG_PROBS,
    REWARD_BASELINES,
    REWARD_COMPONENT_WEIGHTS,
    REWARD_COMPONENTS,
    ROLLOUT_IS_WEIGHTS,
    SUM_PI_SQUARED,
)

AdvantageFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]
STANDARD_KWARGS = ("values", "index", "gamma", "lam", "epsilon", "norm_adv_by_std")
# What an estimator may declare it reads beyond those (reasoning runs), each ``[B]`` or ``[B, T]``:
# the greedy responses' rewards (ReMax), the actor's log-probs of the sampled tokens and the sum
# of its squared token probabilities at each position (the optimal token baselines), and the
# reward's components ``[B, K]`` with their weights ``[K]`` (GDPO).
INPUTS = (
    REWARD_BASELINES,
    OLD_LOG_PROBS,
    SUM_PI_SQUARED,
    REWARD_COMPONENTS,
    REWARD_COMPONENT_WEIGHTS,
    ROLLOUT_IS_WEIGHTS,
)

ADVANTAGES: Registry[AdvantageFn] = Registry("advantage estimator", STANDARD_KWARGS)


def register_advantage(
    name: str,
    *,
    needs_values: bool = False,
    needs_groups: bool = False,
    episodic: bool = False,
    normalizes: bool = False,
    inputs: tuple[str, ...] = (),
    optional_inputs: tuple[str, ...] = (),
) -> Callable[[AdvantageFn], AdvantageFn]:
    """Register an advantage estimator under ``name`` (the value of ``algorithm.adv_type``).

    ``needs_values``: it reads ``values`` (so a value head or critic must exist).
    ``needs_groups``: it compares rows within a group (so ``algorithm.group_size`` must be > 1).
    ``episodic``: it also takes ``dones`` (episodes ending inside a row: embodied rollouts).
    ``normalizes``: its advantages are already whitened over the batch, so
    ``normalize_advantages`` does not whiten them again.
    ``inputs``: what else it reads, as keyword arguments of those names, from ``INPUTS`` (the
    runner produces each only for an estimator that declares it).
    ``optional_inputs``: from ``INPUTS`` too, passed when the batch has them (the rollout
    correction's ``rollout_is_weights``).
    """
    unknown = sorted(set(inputs) - set(INPUTS)) + sorted(set(optional_inputs) - set(INPUTS))
    if unknown:
        raise ValueError(
            f"advantage estimator '{name}': unknown inputs {unknown}; known: {', '.join(INPUTS)}"
        )
    return ADVANTAGES.register(
        name,
        needs_values=needs_values,
        needs_groups=needs_groups,
        episodic=episodic,
        normalizes=normalizes,
        inputs=tuple(inputs),
        optional_inputs=tuple(optional_inputs),
    )


def get_advantage_fn(name: str) -> AdvantageFn:
    """The estimator registered as ``name``; ``KeyError`` naming the close matches otherwise."""
    return ADVANTAGES.get(name)


def _zero_masked(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    return torch.where(valid, x, torch.zeros((), dtype=x.dtype, device=x.device))


@register_advantage("gae", needs_values=True, episodic=True)
def compute_gae(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    values: torch.Tensor | None = None,
    index: Any = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    epsilon: float = 1e-6,
    norm_adv_by_std: bool = True,
    dones: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016), one reverse scan.

    ``delta_t = r_t + gamma * V_next - V_t``, ``A_t = delta_t + gamma * lam * A_next``,
    ``returns = A + V``. The scan runs over valid steps only: at a masked step the running value
    and advantage are carried over unchanged, so left padding, right padding and holes (e.g.
    tool-output tokens) do not break the chain.

    Args:
        values: ``[B, T]``, or ``[B, T + 1]`` where the last column is the value of the state
            reached after the last step, used to bootstrap a row cut off mid-episode (embodied
            rollouts). With ``[B, T]`` the value after the last step is 0 (a finished response).
        dones: ``[B, T]`` 0/1, embodied only: 1 where the episode ended at step t, so step t does
            not bootstrap from step t+1 and the advantage chain restarts. A time-limit
            truncation also sets it; the runner adds ``gamma * V(s_final)`` to that reward.

    Advantages are not whitened here: the runner does it when ``normalize_advantages`` is set.
    """
    if values is None:
        raise ValueError("gae needs values: a value head (embodied) or a critic (reasoning)")
    B, T = token_level_rewards.shape
    if values.shape not in ((B, T), (B, T + 1)):
        raise ValueError(f"gae: values must be [B, T] or [B, T + 1] = {[B, T]}, got {values.shape}")
    valid = response_mask.bool()
    not_done = (
        torch.ones_like(token_level_rewards)
        if dones is None
        else 1.0 - dones.to(token_level_rewards.dtype)
    )
    step_values = values[:, :T]
    bootstrap = values[:, T] if values.shape[1] == T + 1 else torch.zeros_like(values[:, 0])
    # Everything but the recurrence is vectorised: each step's V_next is the value at the next
    # valid step (or the bootstrap value after the last one), found by a reverse cummin.
    positions = torch.where(valid, torch.arange(T, device=valid.device), T)
    after = torch.cat([positions[:, 1:], positions.new_full((B, 1), T)], dim=1)
    next_index = after.flip(1).cummin(dim=1).values.flip(1)
    next_value = torch.cat([step_values, bootstrap[:, None]], dim=1).gather(1, next_index)
    deltas = token_level_rewards + gamma * next_value * not_done - step_values
    decays = gamma * lam * not_done

    has_holes = not bool(valid.all())
    running = torch.zeros_like(bootstrap)
    reversed_advantages = []
    for delta, decay, keep in zip(
        deltas.unbind(1)[::-1], decays.unbind(1)[::-1], valid.unbind(1)[::-1], strict=True
    ):
        advantage = torch.addcmul(delta, decay, running)
        running = torch.where(keep, advantage, running) if has_holes else advantage
        reversed_advantages.append(running)
    advantages = _zero_masked(torch.stack(reversed_advantages[::-1], dim=1), valid)
    returns = _zero_masked(advantages + step_values, valid)
    return advantages, returns


def _group_ids(index: Any, batch_size: int, device: torch.device) -> torch.Tensor:
    """Dense group ids ``[B]`` (0..G-1) from any per-row ids."""
    if index is None:
        raise ValueError("group-based advantage estimators need index: one group id per row")
    if isinstance(index, torch.Tensor):
        if index.shape != (batch_size,):
            raise ValueError(f"index must have one id per row ({batch_size}), got {index.shape}")
        return torch.unique(index, return_inverse=True)[1].to(device)
    ids = list(index) if not isinstance(index, Sequence) else index
    if len(ids) != batch_size:
        raise ValueError(f"index must have one id per row ({batch_size}), got {len(ids)}")
    dense: dict[Any, int] = {}
    return torch.tensor([dense.setdefault(i, len(dense)) for i in ids], device=device)


def group_score_stats(
    scores: torch.Tensor, index: Any
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row group mean, unbiased group std and group size, each ``[B]``.

    A group of one has mean 0 and std 1, so its normalised score is the raw score.
    """
    gid = _group_ids(index, scores.shape[0], scores.device)
    num_groups = int(gid.max()) + 1
    zeros = torch.zeros(num_groups, dtype=scores.dtype, device=scores.device)
    count = zeros.index_add(0, gid, torch.ones_like(scores))
    mean = zeros.index_add(0, gid, scores) / count
    sq_dev = zeros.index_add(0, gid, (scores - mean[gid]) ** 2)
    std = torch.sqrt(sq_dev / (count - 1).clamp_min(1))
    single = count == 1
    mean = torch.where(single, torch.zeros_like(mean), mean)
    std = torch.where(single, torch.ones_like(std), std)
    return mean[gid], std[gid], count[gid]


def _sequence_scores(token_level_rewards: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    return _zero_masked(token_level_rewards, valid).sum(dim=-1)


def _on_valid_tokens(per_row: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``[B]`` -> ``[B, T]``: each row's value on its valid tokens, 0 elsewhere."""
    return _zero_masked(per_row.unsqueeze(-1).expand(valid.shape), valid)


@register_advantage("grpo", needs_groups=True)
def compute_grpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    values: torch.Tensor | None = None,
    index: Any = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    epsilon: float = 1e-6,
    norm_adv_by_std: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO (Shao et al. 2024): ``(s_i - mean_g) / (std_g + epsilon)`` on every valid token.

    ``s_i`` is the sum of row i's rewards; mean and unbiased std are over i's group. With
    ``norm_adv_by_std=False`` the advantage is ``s_i - mean_g`` (Dr. GRPO). returns = advantages.
    """
    valid = response_mask.bool()
    scores = _sequence_scores(token_level_rewards, valid)
    advantages = _on_valid_tokens(_group_normalized(scores, index, epsilon, norm_adv_by_std), valid)
    return advantages, advantages


def _group_normalized(
    scores: torch.Tensor, index: Any, epsilon: float, norm_adv_by_std: bool
) -> torch.Tensor:
    """GRPO's ``(s - mean_g) / (std_g + epsilon)``, or ``s - mean_g`` without the std, ``[B]``."""
    mean, std, _ = group_score_stats(scores, index)
    return (scores - mean) / (std + epsilon) if norm_adv_by_std else scores - mean


@register_advantage("rloo", needs_groups=True)
def compute_rloo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    values: torch.Tensor | None = None,
    index: Any = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    epsilon: float = 1e-6,
    norm_adv_by_std: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE leave-one-out (Ahmadian et al. 2024): ``s_i - mean of the others'`` scores.

    Written as ``n / (n - 1) * (s_i - mean_g)``; a group of one keeps ``s_i``. returns = advantages.
    """
    return _leave_one_out(token_level_rewards, response_mask, index, keep_single=True)


def _leave_one_out(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Any, keep_single: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO's advantage; a group of one keeps its score (``keep_single``) or gets 0."""
    valid = response_mask.bool()
    scores = _sequence_scores(token_level_rewards, valid)
    mean, _, count = group_score_stats(scores, index)
    single = scores if keep_single else torch.zeros_like(scores)
    adv = torch.where(count > 1, count / (count - 1).clamp_min(1) * (scores - mean), single)
    advantages = _on_valid_tokens(adv, valid)
    return advantages, advantages


# verl's name for its vectorised GRPO; this one is vectorised already.
register_advantage("grpo_vectorized", needs_groups=True)(compute_grpo_advantage)


@register_advantage("rloo_vectorized", needs_groups=True)
def compute_rloo_vectorized_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    values: torch.Tensor | None = None,
    index: Any = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    epsilon: float = 1e-6,
    norm_adv_by_std: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's ``rloo_vectorized``: ``rloo``'s leave-one-out advantage, except that a group of
    one gets 0 (it has no other response to compare with), where ``rloo`` (verl's looped one
    too) keeps its score. returns = advantages."""
    return _leave_one_out(token_level_rewards, response_mask, index, keep_single=False)


@register_advantage("grpo_passk", needs_groups=True)
def compute_grpo_passk_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    values: torch.Tensor | None = None,
    index: Any = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    epsilon: float = 1e-6,
    norm_adv_by_std: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pass@k training (Chen et al. 2025, arXiv 2503.19595), verl's ``grpo_passk``: in each group
    only the best response learns, by ``s_max - s_second`` (over the group's unbiased std plus
    ``epsilon`` when ``norm_adv_by_std``); every other response gets 0. A tie at the top gives
    0 to all. Needs groups of at least 2. returns = advantages.
    """
    valid = response_mask.bool()
    scores = _sequence_scores(token_level_rewards, valid)
    gid = _group_ids(index, scores.shape[0], scores.device)
    adv = torch.zeros_like(scores)
    for group in range(int(gid.max()) + 1):
        rows = (gid == group).nonzero().squeeze(-1)
        if rows.numel() < 2:
            raise ValueError(
                f"grpo_passk needs at least 2 responses per group; group {group} has "
                f"{rows.numel()} (algorithm.group_size)"
            )
        top, where = torch.topk(scores[rows], 2)
        gap = top[0] - top[1]
        adv[rows[where[0]]] = gap / (scores[rows].std() + epsilon) if norm_adv_by_std else gap
    advantages = _on_valid_tokens(adv, valid)
    return advantages, advantages


@register_advantage("opo", needs_groups=True)
def compute_opo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    values: torch.Tensor | None = None,
    index: Any = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    epsilon: float = 1e-6,
    norm_adv_by_std: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """OPO (Hao et al. 2025, arXiv 2505.23585), verl's ``opo``: ``s_i - b_g`` with the optimal
    baseline for sequence-level rewards, the length-weighted group mean
    ``b_g = sum_j len_j s_j / sum_j len_j`` (``len``: valid tokens); a group of one has
    ``b = 0``. No std normalisation. returns = advantages.
    """
    valid = response_mask.bool()
    scores = _sequence_scores(token_level_rewards, valid)
    lengths = valid.sum(-1).to(scores.dtype)
    gid = _group_ids(index, scores.shape[0], scores.device)
    zeros = torch.zeros(int(gid.max()) + 1, dtype=scores.dtype, device=scores.device)
    count = zeros.index_add(0, gid, torch.ones_like(scores))
    weighted = zeros.index_add(0, gid, lengths * scores)
    total = zeros.index_add(0, gid, lengths)
    baseline = torch.where(count > 1, weighted / total.clamp_min(1), zeros)
    advantages = _on_valid_tokens(scores - baseline[gid], valid)
    return advantages, advantages


@register_advantage("gpg", needs_groups=True)
def compute_gpg_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    values: torch.Tensor | None = None,
    index: Any = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    epsilon: float = 1e-6,
    norm_adv_by_std: bool = True,
    f_norm: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GPG (Chu et al. 2025, arXiv 2504.02546), verl's ``gpg`` estimator:
    ``alpha * (s_i - mean_g) / f_norm`` with ``alpha = B / (responses whose score is not 0)``,
    which scales the gradient up by the share of responses that carry signal; a group of one has
    mean 0. No std normalisation. returns = advantages.
    """
    valid = response_mask.bool()
    scores = _sequence_scores(token_level_rewards, valid)
    mean, _, _ = group_score_stats(scores, index)
    alpha = scores.shape[0] / torch.count_nonzero(scores).clamp(min=1)
    advantages = _on_valid_tokens(alpha * (scores - mean) / f_norm, valid)
    return advantages, advantages


@register_advantage("reinforce_plus_plus", normalizes=True)
def compute_reinforce_plus_plus_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    values: torch.Tensor | None = None,
    index: Any = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    epsilon: float = 1e-6,
    norm_adv_by_std: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ (Hu 2025): discounted return-to-go, whitened over the whole batch.

    ``G_t = r_t + gamma * G_next`` along valid steps (carried unchanged through masked ones);
    returns = G on valid steps, advantages = masked_whiten(returns).
    """
    valid = response_mask.bool()
    T = token_level_rewards.shape[1]
    returns = torch.zeros_like(token_level_rewards)
    running = torch.zeros_like(token_level_rewards[:, 0])
    for t in reversed(range(T)):
        running = torch.where(valid[:, t], token_level_rewards[:, t] + gamma * running, running)
        returns[:, t] = running
    returns = _zero_masked(returns, valid)
    return masked_whiten(returns, valid), returns


@register_advantage("reinforce_plus_plus_baseline", needs_groups=True, normalizes=True)
def compute_reinforce_plus_plus_baseline_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    values: torch.Tensor | None = None,
    index: Any = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    epsilon: float = 1e-6,
    norm_adv_by_std: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ with a group-mean baseline: ``masked_whiten((s_i - mean_g) * mask)``.

    The group-centred score is broadcast over valid tokens, then whitened over the batch.
    returns = advantages.
    """
    valid = response_mask.bool()
    scores = _sequence_scores(token_level_rewards, valid)
    mean, _, _ = group_score_stats(scores, index)
    advantages = masked_whiten(_on_valid_tokens(scores - mean, valid), valid)
    return advantages, advantages


@register_advantage("remax", inputs=("reward_baselines",))
def compute_remax_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    values: torch.Tensor | None = None,
    index: Any = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    epsilon: float = 1e-6,
    norm_adv_by_std: bool = True,
    reward_baselines: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ReMax (Li et al. 2023, arXiv 2310.10505), verl's ``remax``: ``A_t = G_t - b`` with
    ``G_t`` the undiscounted reward-to-go and ``b`` (``reward_baselines``, ``[B]``) the reward of
    the greedy response to the row's prompt (the runner generates it). returns = G.
    """
    if reward_baselines is None:
        raise ValueError("remax needs reward_baselines: the greedy responses' rewards")
    valid = response_mask.bool()
    returns = _reward_to_go(token_level_rewards, valid)
    baseline = reward_baselines.to(returns.dtype)[:, None]
    return _zero_masked(returns - baseline, valid), returns


@register_advantage(
    "gdpo",
    needs_groups=True,
    normalizes=True,
    inputs=(REWARD_COMPONENTS, REWARD_COMPONENT_WEIGHTS),
)
def compute_gdpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    values: torch.Tensor | None = None,
    index: Any = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    epsilon: float = 1e-6,
    norm_adv_by_std: bool = True,
    reward_components: torch.Tensor | None = None,
    reward_component_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GDPO (Liu et al. 2026, arXiv 2601.05242), verl's ``gdpo``: each reward component
    ``r_k`` (``reward_components[:, k]``) is normalised within its group as GRPO does,
    ``(r_k - mean_g) / (std_g + epsilon)`` (or ``r_k - mean_g`` without ``norm_adv_by_std``),
    the results are summed with ``reward_component_weights`` ``w_k``, and the sum is whitened
    over the valid tokens of the batch. Normalising each component apart keeps responses that
    differ in one component apart, where GRPO on the summed reward can map them to one
    advantage. Without ``reward_components``, the one reward is ``token_level_rewards`` summed
    over each response, weighed 1, as verl's fallback does (GRPO's advantage, whitened); with
    them, ``token_level_rewards`` is not read (the components are the reward).
    returns = advantages.
    """
    if reward_components is None:
        reward_components = token_level_rewards.sum(-1, keepdim=True)
        reward_component_weights = torch.ones(1)
    elif reward_component_weights is None:
        raise ValueError("gdpo: reward_components [B, K] need reward_component_weights [K]")
    valid = response_mask.bool()
    components = reward_components.to(token_level_rewards.dtype)
    weights = reward_component_weights.to(components)
    if components.dim() != 2 or components.shape[0] != valid.shape[0]:
        raise ValueError(
            f"gdpo: reward_components must be [B={valid.shape[0]}, K], got "
            f"{tuple(components.shape)}"
        )
    if weights.shape != (components.shape[1],):
        raise ValueError(
            f"gdpo: {components.shape[1]} reward components but weights of shape "
            f"{tuple(weights.shape)}"
        )
    total = torch.zeros_like(components[:, 0])
    for k in range(components.shape[1]):
        normalized = _group_normalized(components[:, k], index, epsilon, norm_adv_by_std)
        total = total + weights[k] * normalized
    advantages = masked_whiten(_on_valid_tokens(total, valid), valid)
    return advantages, advantages


def _reward_to_go(token_level_rewards: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``G_t``: the sum of the valid rewards from t on; 0 at masked positions."""
    kept = _zero_masked(token_level_rewards, valid)
    return _zero_masked(kept.flip(-1).cumsum(-1).flip(-1), valid)


@register_advantage(
    "optimal_token_baseline",
    needs_groups=True,
    inputs=(OLD_LOG_PROBS, SUM_PI_SQUARED),
    optional_inputs=(ROLLOUT_IS_WEIGHTS,),
)
def compute_optimal_token_baseline_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    values: torch.Tensor | None = None,
    index: Any = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    epsilon: float = 1e-8,
    norm_adv_by_std: bool = True,
    old_log_probs: torch.Tensor | None = None,
    sum_pi_squared: torch.Tensor | None = None,
    handle_zero_tail: bool = True,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The optimal token baseline (verl's ``optimal_token_baseline``): a baseline per group and
    token position, ``b_t = sum_i G_it W_it / (sum_i W_it + epsilon)`` over the group's
    responses still running at t, where ``W_it`` is the cumulative ``1 - 2 pi + sum pi^2`` (the
    squared norm of the score function of each sampled token, from ``old_log_probs`` and
    ``sum_pi_squared``, the sum of the squared token probabilities) up to t: paths of high
    variance weigh more. ``A_t = G_t - b_t``; a group of one has b = 0. ``handle_zero_tail``
    (on, as verl's function and trainer have it): the group's one longest response gets b = 0
    past the second longest. ``rollout_is_weights``
    (the rollout's truncated importance weights rho, as verl's rollout correction gives them)
    scale each token's term by rho^2 before the cumulative sum. returns = G.
    """
    return _optimal_token_baseline(
        token_level_rewards,
        response_mask,
        index,
        old_log_probs,
        sum_pi_squared,
        handle_zero_tail,
        epsilon,
        rollout_is_weights=rollout_is_weights,
        compact=False,
        name="optimal_token_baseline",
    )


@register_advantage(
    "tir_optimal_token_baseline",
    needs_groups=True,
    inputs=(OLD_LOG_PROBS, SUM_PI_SQUARED),
    optional_inputs=(ROLLOUT_IS_WEIGHTS,),
)
def compute_tir_optimal_token_baseline_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    values: torch.Tensor | None = None,
    index: Any = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    epsilon: float = 1e-8,
    norm_adv_by_std: bool = True,
    old_log_probs: torch.Tensor | None = None,
    sum_pi_squared: torch.Tensor | None = None,
    handle_zero_tail: bool = True,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``optimal_token_baseline`` for tool-integrated (multi-turn) responses, verl's
    ``tir_optimal_token_baseline``: step t is a response's t-th valid token (tool output
    between turns is masked out and skipped), empty responses do not count in their group, and
    ``handle_zero_tail`` is on by default. For one-turn responses it equals
    ``optimal_token_baseline`` with ``handle_zero_tail``.
    """
    return _optimal_token_baseline(
        token_level_rewards,
        response_mask,
        index,
        old_log_probs,
        sum_pi_squared,
        handle_zero_tail,
        epsilon,
        rollout_is_weights=rollout_is_weights,
        compact=True,
        name="tir_optimal_token_baseline",
    )


def _optimal_token_baseline(
    rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    old_log_probs: torch.Tensor | None,
    sum_pi_squared: torch.Tensor | None,
    handle_zero_tail: bool,
    epsilon: float,
    *,
    rollout_is_weights: torch.Tensor | None = None,
    compact: bool,
    name: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    if old_log_probs is None or sum_pi_squared is None:
        raise ValueError(f"{name} needs old_log_probs and sum_pi_squared from the actor")
    valid = response_mask.bool()
    B, T = rewards.shape
    returns = _reward_to_go(rewards, valid)
    w = 1 - 2 * old_log_probs.to(returns.dtype).exp() + sum_pi_squared.to(returns.dtype)
    if rollout_is_weights is not None:  # truncated IS: W scaled by rho^2 (verl's MSE argument)
        w = w * rollout_is_weights.to(w.dtype) ** 2
    cumulative = _zero_masked(w, valid).cumsum(-1)
    # compact: each row's valid tokens moved to the front, in order (step k = k-th valid token)
    order = torch.argsort((~valid).to(torch.int8), dim=1, stable=True) if compact else None
    lengths = valid.sum(-1)
    if compact:
        returns_at, weight_at = returns.gather(1, order), cumulative.gather(1, order)
        live = torch.arange(T, device=valid.device) < lengths[:, None]
    else:
        returns_at, weight_at, live = returns, cumulative, valid
    weight_at = _zero_masked(weight_at, live)
    gid = _group_ids(index, B, rewards.device)
    members = (lengths > 0) if compact else torch.ones_like(lengths, dtype=torch.bool)
    groups = int(gid.max()) + 1
    zeros = torch.zeros(groups, T, dtype=returns.dtype, device=returns.device)
    numerator = zeros.index_add(0, gid, returns_at * weight_at)
    denominator = zeros.index_add(0, gid, weight_at) + epsilon
    count = torch.zeros(groups, dtype=torch.long, device=gid.device).index_add(
        0, gid, members.long()
    )
    baseline = torch.where(count[gid, None] > 1, (numerator / denominator)[gid], 0.0)
    if handle_zero_tail:
        baseline = _zero_tail(baseline, lengths, gid, members)
    advantages_at = _zero_masked(returns_at - baseline, live)
    if compact:  # back to each valid token's own position
        advantages = torch.zeros_like(returns).scatter(1, order, advantages_at)
    else:
        advantages = advantages_at
    return _zero_masked(advantages, valid), returns


def _zero_tail(
    baseline: torch.Tensor, lengths: torch.Tensor, gid: torch.Tensor, members: torch.Tensor
) -> torch.Tensor:
    """No baseline where only the group's one longest response goes on: its steps from the
    second-longest member's length on."""
    baseline = baseline.clone()
    for group in torch.unique(gid[members]).tolist():
        rows = ((gid == group) & members).nonzero().flatten()
        if rows.numel() < 2:
            continue
        ordered = lengths[rows].sort().values
        longest, second = int(ordered[-1]), int(ordered[-2])
        if longest > second:
            row = rows[lengths[rows] == longest][0]
            baseline[row, second:] = 0.0
    return baseline


def compute_advantages(
    name: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    normalize: bool,
    dones: torch.Tensor | None = None,
    inputs: dict[str, torch.Tensor] | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The advantages and returns of estimator ``name``, whitened when ``normalize``.

    The one place both modes get their advantages: ``kwargs`` are the standard ones
    (``STANDARD_KWARGS``); ``inputs`` holds what estimators may declare they read (``INPUTS``),
    and each gets those it declares; ``dones`` goes to episodic estimators (embodied rollouts,
    where an episode may end inside a row). Whitening (``masked_whiten`` over the valid positions
    of the whole batch, i.e. with global moments: the driver holds every rank's rows) is skipped
    for an estimator that already whitens its output (REINFORCE++).
    """
    entry = ADVANTAGES.entry(name)
    if dones is not None:
        if not entry.traits.get("episodic"):
            raise ValueError(f"advantage estimator '{name}' cannot take episode ends (dones)")
        kwargs["dones"] = dones
    for needed in entry.traits.get("inputs", ()):
        if needed not in (inputs or {}):
            raise ValueError(f"advantage estimator '{name}' needs {needed}; pass it in inputs")
        kwargs[needed] = inputs[needed]
    for wanted in entry.traits.get("optional_inputs", ()):  # read when the batch has them
        if wanted in (inputs or {}):
            kwargs[wanted] = inputs[wanted]
    advantages, returns = entry.fn(token_level_rewards, response_mask, **kwargs)
    if normalize and not entry.traits.get("normalizes"):
        advantages = masked_whiten(advantages, response_mask)
    return advantages, returns


def bootstrap_truncations(
    rewards: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: float,
    at_termination: bool = False,
) -> torch.Tensor:
    """``r_t + gamma * V(s_final)`` where an episode was cut by a time limit, else ``r_t``.

    A time limit is not a terminal state: the return goes on past it, so the step that hit it
    is credited with the value of where the episode stopped (Pardo et al. 2018). All ``[B, T]``;
    ``next_values[:, t]`` is V of the observation after step t (for a step that ended its
    episode, the episode's final observation). ``at_termination``: a terminated step is
    bootstrapped too (RLinf's ``bootstrap_type: always``, ManiSkill's ``bootstrap_at_done``),
    for tasks whose termination is a success that the return should not stop at.
    """
    terminated, truncated = terminated.bool(), truncated.bool()
    cut = truncated | terminated if at_termination else truncated & ~terminated
    return rewards + gamma * next_values * cut
